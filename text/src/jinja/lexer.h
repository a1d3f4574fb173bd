// The chat-template lexer: Jinja source to tokens, with Hugging Face's whitespace rules applied
// (trim_blocks, lstrip_blocks, `-` control, comments dropped, one final newline dropped).
#pragma once

#include <string>
#include <vector>

namespace pstar::text::jinja {

struct Tok {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string value;
  int line = 1;
};

// Throws FormatError naming `origin` and the line for an unclosed tag, comment or string, or a
// character no token starts with.
std::vector<Tok> lex(const std::string& source, const std::string& origin);

}  // namespace pstar::text::jinja
