// UTF-8 validation and decoding for the tokenizer (Hugging Face takes only valid UTF-8 text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pstar::text {

struct Utf8Check {
  // Bytes from the start that are whole, valid characters.
  size_t valid = 0;
  // True when the bytes after `valid` are an invalid sequence (not just a character cut short by
  // the end of the text).
  bool invalid = false;
};

// Checks `s`; stops at the first invalid byte. Overlong forms, surrogates and code points above
// U+10FFFF are invalid, as in Rust's str and Python's decoder.
Utf8Check check_utf8(std::string_view s);

// Decodes the character at s[i] (which must be valid UTF-8) and advances i past it.
uint32_t decode_utf8(std::string_view s, size_t& i);

// Appends the UTF-8 encoding of `cp` to `out`.
template <typename String>
void append_utf8(String& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

}  // namespace pstar::text
