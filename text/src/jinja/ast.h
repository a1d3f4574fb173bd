// The parsed form of a chat template (Note [chat templates] in pstar/text/chat_template.h):
// expressions and statement nodes, as parser.cpp builds them and eval.cpp runs them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.h"

namespace pstar::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // items (a list or a tuple: Jinja's tuples act as lists here)
    kDict,     // items: key, value, key, value, ...
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d]; absent parts are null
    kCall,     // a(items..., kwargs...)
    kFilter,   // a | name(items..., kwargs...)
    kTest,     // a is [not] name(items...)
    kUnary,    // name ("not", "-", "+") applied to a
    kBinary,   // a name b: or and in notin == != < > <= >= + - ~ * / // % **
    kCond,     // a if b else c (c may be null: undefined)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr a, b, c, d;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,        // text
    kOutput,      // {{ expr }}
    kIf,          // branches: (condition, body)..., a null condition is the else
    kFor,         // {% for targets in expr [if filter] %} body {% else %} else_body
    kSet,         // {% set targets = expr %} or {% set targets[0].attr = expr %}
    kSetBlock,    // {% set targets[0] %} body {% endset %}
    kBreak,       // {% break %}
    kContinue,    // {% continue %}
    kGeneration,  // {% generation %} body {% endgeneration %} (Hugging Face's marker)
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: targets[0].attr
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

// The template, parsed. `origin` names it in error messages ("ORIGIN, line N: ...").
struct Program {
  std::string origin;
  Body body;
};

// Parses Jinja source as Hugging Face's chat templates are rendered: trim_blocks and
// lstrip_blocks on, `-` whitespace control, comments, the loop-control extension. Throws
// FormatError naming the origin, the line and what was expected.
std::unique_ptr<Program> parse(const std::string& source, const std::string& origin);

}  // namespace pstar::text::jinja
