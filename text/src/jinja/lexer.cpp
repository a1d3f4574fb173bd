#include "lexer.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "pstar/base/error.h"

namespace pstar::text::jinja {
namespace {

// The source after apply_chat_template's trim_blocks and lstrip_blocks, and where each of the
// source's newlines went, so that a message names the template's own line (Note [source lines]).
struct Trimmed {
  std::string text;
  // For each newline of the source, in order: the position in `text` from which text is on the
  // next line (one past a newline kept; where a dropped one was).
  std::vector<size_t> line_starts;
  // The 1-based line of the source that text[pos] came from.
  int line_at(size_t pos) const {
    return 1 + static_cast<int>(std::upper_bound(line_starts.begin(), line_starts.end(), pos) -
                                line_starts.begin());
  }
};

// Note [source lines]
// trim_blocks drops the newline after a block tag before anything is lexed, so counting the
// newlines of the lexed text would put a construct on line 41 of Qwen3's template at line 9.
// Every source newline is therefore recorded where it was kept or dropped, and tokens take their
// line from the position they start at.
//
// apply_chat_template renders with trim_blocks and lstrip_blocks: spaces and tabs from the start
// of a line up to a block or comment tag go, and so does the first newline after one.
Trimmed apply_block_whitespace(const std::string& source) {
  // Jinja's keep_trailing_newline=False: one newline at the very end is not part of the output.
  const std::string s =
      !source.empty() && source.back() == '\n' ? source.substr(0, source.size() - 1) : source;
  Trimmed t;
  std::string& out = t.text;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (i == 0 || s[i - 1] == '\n') {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '%' || s[j + 1] == '#')) i = j;
    }
    if (i + 1 < s.size() && (s[i] == '%' || s[i] == '#') && s[i + 1] == '}') {
      out += s[i];
      out += '}';
      i += 2;
      if (i < s.size() && s[i] == '\n') {
        t.line_starts.push_back(out.size());
        ++i;
      }
      continue;
    }
    if (s[i] == '\n') t.line_starts.push_back(out.size() + 1);
    out += s[i++];
  }
  return t;
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin)
      : src_(apply_block_whitespace(source)), s_(src_.text), origin_(origin) {}

  std::vector<Tok> run() {
    size_t text_start = 0;
    bool strip_next = false;
    while (pos_ < s_.size()) {
      const size_t open = s_.find('{', pos_);
      if (open == std::string::npos || open + 1 >= s_.size()) break;
      const char k = s_[open + 1];
      if (k != '{' && k != '%' && k != '#') {
        pos_ = open + 1;
        continue;
      }
      const bool strip_before = open + 2 < s_.size() && s_[open + 2] == '-';
      emit_text(text_start, open, strip_next, strip_before);
      pos_ = open + 2 + (strip_before ? 1 : 0);
      if (k == '#') {
        const size_t close = s_.find("#}", pos_);
        if (close == std::string::npos) fail("a comment {# is not closed");
        strip_next = close > pos_ && s_[close - 1] == '-';
        pos_ = close + 2;
      } else {
        push(k == '{' ? Tok::Type::kVarBegin : Tok::Type::kBlockBegin, "", open);
        strip_next = lex_tag(k == '{' ? '}' : '%');
      }
      text_start = pos_;
    }
    emit_text(text_start, s_.size(), strip_next, false);
    push(Tok::Type::kEof, "", s_.size());
    return std::move(toks_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    PSTAR_THROW(FormatError, origin_, ", line ", src_.line_at(pos_), ": ", what);
  }

  // A token that starts at s_[start], with the source line it is on (Note [source lines]).
  void push(Tok::Type type, std::string value, size_t start) {
    toks_.push_back({type, std::move(value), src_.line_at(start)});
  }

  void emit_text(size_t begin, size_t end, bool strip_left, bool strip_right) {
    std::string t = s_.substr(begin, end - begin);
    if (strip_left) {
      const size_t first = t.find_first_not_of(" \t\r\n");
      begin += first == std::string::npos ? t.size() : first;
      t.erase(0, first);
    }
    if (strip_right) {
      const size_t last = t.find_last_not_of(" \t\r\n");
      t.erase(last == std::string::npos ? 0 : last + 1);
    }
    if (!t.empty()) push(Tok::Type::kText, std::move(t), begin);
  }

  // Tokens up to the closing `}}` or `%}`; returns whether it was `-}}` / `-%}`.
  bool lex_tag(char close) {
    while (true) {
      while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ >= s_.size()) fail(close == '}' ? "{{ is not closed" : "{% is not closed");
      const char c = s_[pos_];
      if (c == '-' && pos_ + 2 < s_.size() && s_[pos_ + 1] == close && s_[pos_ + 2] == '}') {
        end_tag(close);
        pos_ += 3;
        return true;
      }
      if (c == close && pos_ + 1 < s_.size() && s_[pos_ + 1] == '}') {
        end_tag(close);
        pos_ += 2;
        return false;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t b = pos_;
        while (pos_ < s_.size() &&
               (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
          ++pos_;
        push(Tok::Type::kName, s_.substr(b, pos_ - b), b);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* const two[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two)
          if (s_.compare(pos_, 2, t) == 0) op = t;
        if (op.size() == 1 && std::string("+-*/%~<>=()[]{},.:|").find(c) == std::string::npos)
          fail(std::string("unexpected character '") + c + "' in a tag");
        push(Tok::Type::kOp, op, pos_);
        pos_ += op.size();
      }
    }
  }

  void end_tag(char close) {
    push(close == '}' ? Tok::Type::kVarEnd : Tok::Type::kBlockEnd, "", pos_);
  }

  void lex_number() {
    const size_t b = pos_;
    bool is_float = false;
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      ++pos_;
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      is_float = true;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    std::string text = s_.substr(b, pos_ - b);
    std::string digits;
    for (char ch : text)
      if (ch != '_') digits += ch;
    push(is_float ? Tok::Type::kFloat : Tok::Type::kInt, digits, b);
  }

  // Python's string literal escapes, as Jinja reads them.
  void lex_string(char quote) {
    const size_t start = pos_++;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("a string literal is not closed");
      const char c = s_[pos_++];
      if (c == quote) break;
      if (c != '\\' || pos_ >= s_.size()) {
        out += c;
        continue;
      }
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // a line continuation
        default:
          out += '\\';
          out += e;
      }
    }
    push(Tok::Type::kString, std::move(out), start);
  }

  const Trimmed src_;
  const std::string& s_;  // src_.text
  const std::string& origin_;
  size_t pos_ = 0;
  std::vector<Tok> toks_;
};

}  // namespace

std::vector<Tok> lex(const std::string& source, const std::string& origin) {
  return Lexer(source, origin).run();
}

}  // namespace pstar::text::jinja
