// Tokens (lexer.h) to the parsed form (ast.h): a recursive-descent parser with Jinja2's operator
// precedence.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "ast.h"
#include "lexer.h"
#include "pstar/base/error.h"

namespace pstar::text::jinja {
namespace {

// ---- parsing -----------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::vector<Tok> toks, const std::string& origin) : t_(std::move(toks)), origin_(origin) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  using Type = Tok::Type;

  const Tok& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Tok& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().type == Type::kOp && peek().value == op; }
  bool at_name(const char* name) const {
    return peek().type == Type::kName && peek().value == name;
  }
  bool accept_op(const char* op) {
    if (!at_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(const char* name) {
    if (!at_name(name)) return false;
    ++i_;
    return true;
  }

  [[noreturn]] void fail(const std::string& what) const {
    PSTAR_THROW(FormatError, origin_, ", line ", peek().line, ": ", what);
  }
  static std::string describe(const Tok& t) {
    switch (t.type) {
      case Type::kEof:
        return "the end of the template";
      case Type::kVarEnd:
        return "'}}'";
      case Type::kBlockEnd:
        return "'%}'";
      case Type::kText:
        return "text";
      default:
        return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', found " + describe(peek()));
  }
  void expect(Type type, const char* what) {
    if (peek().type != type) fail(std::string("expected ") + what + ", found " + describe(peek()));
    ++i_;
  }
  std::string expect_name() {
    if (peek().type != Type::kName) fail("expected a name, found " + describe(peek()));
    return next().value;
  }

  ExprPtr make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = peek().line;
    return e;
  }

  // Statements up to a block tag whose keyword is in `ends` (the closing one last); that keyword
  // goes to *end.
  Body parse_body(const std::vector<std::string>& ends, std::string* end) {
    Body body;
    while (true) {
      const Tok& t = peek();
      if (t.type == Type::kEof) {
        if (!ends.empty()) fail("expected {% " + ends.back() + " %} before the end");
        return body;
      }
      if (t.type == Type::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = next().value;
        body.push_back(std::move(n));
      } else if (t.type == Type::kVarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        n->expr = parse_expression();
        expect(Type::kVarEnd, "'}}'");
        body.push_back(std::move(n));
      } else {
        ++i_;  // kBlockBegin
        const std::string keyword = expect_name();
        if (std::find(ends.begin(), ends.end(), keyword) != ends.end()) {
          *end = keyword;
          return body;
        }
        body.push_back(parse_statement(keyword, t.line));
      }
    }
  }

  NodePtr parse_statement(const std::string& keyword, int line) {
    auto n = std::make_unique<Node>();
    n->line = line;
    std::string end;
    if (keyword == "if") {
      n->kind = Node::Kind::kIf;
      ExprPtr cond = parse_expression();
      while (true) {
        expect(Type::kBlockEnd, "'%}'");
        Body body = parse_body({"elif", "else", "endif"}, &end);
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (end == "elif") {
          cond = parse_expression();
          continue;
        }
        if (end == "else") {
          expect(Type::kBlockEnd, "'%}'");
          n->branches.emplace_back(nullptr, parse_body({"endif"}, &end));
        }
        break;
      }
    } else if (keyword == "for") {
      n->kind = Node::Kind::kFor;
      n->targets.push_back(expect_name());
      while (accept_op(",")) n->targets.push_back(expect_name());
      if (!accept_name("in")) fail("expected 'in' in the for loop");
      n->expr = parse_or();  // a condition after the iterable is the loop's filter
      if (accept_name("if")) n->filter = parse_expression();
      if (at_name("recursive")) fail("recursive for loops are not supported");
      expect(Type::kBlockEnd, "'%}'");
      n->body = parse_body({"else", "endfor"}, &end);
      if (end == "else") {
        expect(Type::kBlockEnd, "'%}'");
        n->else_body = parse_body({"endfor"}, &end);
      }
    } else if (keyword == "set") {
      n->targets.push_back(expect_name());
      if (accept_op(".")) {
        n->attr = expect_name();
      } else {
        while (accept_op(",")) n->targets.push_back(expect_name());
      }
      if (accept_op("=")) {
        n->kind = Node::Kind::kSet;
        n->expr = parse_tuple_or_expression();
      } else {
        if (n->targets.size() != 1 || !n->attr.empty()) fail("a block set takes one name");
        n->kind = Node::Kind::kSetBlock;
        expect(Type::kBlockEnd, "'%}'");
        n->body = parse_body({"endset"}, &end);
      }
    } else if (keyword == "break" || keyword == "continue") {
      n->kind = keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    } else if (keyword == "generation") {
      n->kind = Node::Kind::kGeneration;
      expect(Type::kBlockEnd, "'%}'");
      n->body = parse_body({"endgeneration"}, &end);
    } else {
      fail("{% " + keyword +
           " %} is not supported by pstar's chat templates (supported: if, for, "
           "set, break, continue, generation)");
    }
    expect(Type::kBlockEnd, "'%}'");
    return n;
  }

  // `a, b` without brackets is a tuple (a list here).
  ExprPtr parse_tuple_or_expression() {
    ExprPtr first = parse_expression();
    if (!at_op(",")) return first;
    auto list = make(Expr::Kind::kList);
    list->items.push_back(std::move(first));
    while (accept_op(",")) list->items.push_back(parse_expression());
    return list;
  }

  ExprPtr parse_expression() {
    ExprPtr e = parse_or();
    if (accept_name("if")) {
      auto c = make(Expr::Kind::kCond);
      c->b = parse_or();
      c->a = std::move(e);
      if (accept_name("else")) c->c = parse_expression();
      return c;
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::kBinary);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (accept_name("or")) e = binary("or", std::move(e), parse_and());
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (accept_name("and")) e = binary("and", std::move(e), parse_not());
    return e;
  }

  ExprPtr parse_not() {
    if (accept_name("not")) {
      auto e = make(Expr::Kind::kUnary);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      static const char* const ops[] = {"==", "!=", "<", ">", "<=", ">="};
      bool matched = false;
      for (const char* op : ops) {
        if (accept_op(op)) {
          e = binary(op, std::move(e), parse_math1());
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (accept_name("in")) {
        e = binary("in", std::move(e), parse_math1());
      } else if (at_name("not") && peek(1).type == Type::kName && peek(1).value == "in") {
        i_ += 2;
        e = binary("notin", std::move(e), parse_math1());
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const std::string op = next().value;
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (accept_op("~")) e = binary("~", std::move(e), parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = next().value;
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (accept_op("**")) e = binary("**", std::move(e), parse_unary());
    return e;
  }

  ExprPtr parse_unary() {
    if (at_op("-") || at_op("+")) {
      auto e = make(Expr::Kind::kUnary);
      e->name = next().value;
      e->a = parse_unary();
      return e;
    }
    return parse_filters(parse_postfix(parse_primary()));
  }

  void parse_call_args(Expr& e) {
    // After '(': positional and keyword arguments up to ')'.
    while (!accept_op(")")) {
      if (!e.items.empty() || !e.kwargs.empty()) expect_op(",");
      if (accept_op(")")) break;  // a trailing comma
      if (peek().type == Type::kName && peek(1).type == Type::kOp && peek(1).value == "=") {
        std::string key = next().value;
        ++i_;
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        e.items.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_primary() {
    const Tok& t = peek();
    switch (t.type) {
      case Type::kString: {
        auto e = make(Expr::Kind::kLiteral);
        std::string s = next().value;
        while (peek().type == Type::kString) s += next().value;  // adjacent literals join
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Type::kInt: {
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value::integer(std::strtoll(next().value.c_str(), nullptr, 10));
        return e;
      }
      case Type::kFloat: {
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value::floating(std::strtod(next().value.c_str(), nullptr));
        return e;
      }
      case Type::kName: {
        const std::string name = next().value;
        auto e = make(Expr::Kind::kLiteral);
        if (name == "true" || name == "True") {
          e->literal = Value::boolean(true);
        } else if (name == "false" || name == "False") {
          e->literal = Value::boolean(false);
        } else if (name == "none" || name == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = name;
        }
        return e;
      }
      case Type::kOp:
        if (accept_op("(")) {
          ExprPtr inner = parse_tuple_or_expression();
          expect_op(")");
          return inner;
        }
        if (accept_op("[")) {
          auto e = make(Expr::Kind::kList);
          while (!accept_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (accept_op("]")) break;
            e->items.push_back(parse_expression());
          }
          return e;
        }
        if (accept_op("{")) {
          auto e = make(Expr::Kind::kDict);
          while (!accept_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (accept_op("}")) break;
            e->items.push_back(parse_expression());
            expect_op(":");
            e->items.push_back(parse_expression());
          }
          return e;
        }
        break;
      default:
        break;
    }
    fail("expected a value, found " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        auto a = make(Expr::Kind::kAttr);
        a->name = peek().type == Type::kInt ? next().value : expect_name();
        a->a = std::move(e);
        e = std::move(a);
      } else if (accept_op("[")) {
        ExprPtr parts[3];
        int colons = 0;
        while (!accept_op("]")) {
          if (accept_op(":")) {
            if (++colons > 2) fail("a slice has at most two ':'");
            continue;
          }
          if (parts[colons]) fail("expected ']' or ':' in a subscript");
          parts[colons] = parse_expression();
        }
        auto s = make(colons ? Expr::Kind::kSlice : Expr::Kind::kItem);
        s->a = std::move(e);
        if (!colons && !parts[0]) fail("an empty subscript");
        s->b = std::move(parts[0]);
        s->c = std::move(parts[1]);
        s->d = std::move(parts[2]);
        e = std::move(s);
      } else if (accept_op("(")) {
        auto c = make(Expr::Kind::kCall);
        c->a = std::move(e);
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        auto f = make(Expr::Kind::kFilter);
        f->name = expect_name();
        f->a = std::move(e);
        if (accept_op("(")) parse_call_args(*f);
        e = parse_postfix(std::move(f));
      } else if (accept_name("is")) {
        auto t = make(Expr::Kind::kTest);
        t->negated = accept_name("not");
        // `is none`, `is true`: test names that are also literals.
        t->name = expect_name();
        t->a = std::move(e);
        if (accept_op("(")) {
          parse_call_args(*t);
        } else if (peek().type == Type::kString || peek().type == Type::kInt ||
                   peek().type == Type::kFloat ||
                   (peek().type == Type::kName && !at_name("and") && !at_name("or") &&
                    !at_name("else") && !at_name("if") && !at_name("in") && !at_name("is") &&
                    !at_name("not"))) {
          t->items.push_back(parse_primary());  // `is divisibleby 3`, `is equalto x`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Tok> t_;
  const std::string& origin_;
  size_t i_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse(const std::string& source, const std::string& origin) {
  auto program = std::make_unique<Program>();
  program->origin = origin;
  Parser parser(lex(source, origin), origin);
  program->body = parser.parse_all();
  return program;
}

}  // namespace pstar::text::jinja
