#include "pstar/formats/token_file.h"

#include <limits>

#include "pstar/base/error.h"

namespace pstar::formats {
namespace {

uint32_t token_dtype_max(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kU16:
      return std::numeric_limits<uint16_t>::max();
    case TokenDType::kU32:
      return std::numeric_limits<uint32_t>::max();
  }
  PSTAR_INTERNAL_ASSERT(false, "unhandled TokenDType ", static_cast<int>(dtype));
}

// Byte-wise little-endian loads: correct on any host, and compiled to one load on x86/ARM.
uint32_t load_token(const uint8_t* p, TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kU16:
      return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
    case TokenDType::kU32:
      return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
             static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  }
  PSTAR_INTERNAL_ASSERT(false, "unhandled TokenDType ", static_cast<int>(dtype));
}

}  // namespace

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kU16:
      return "uint16";
    case TokenDType::kU32:
      return "uint32";
  }
  PSTAR_INTERNAL_ASSERT(false, "unhandled TokenDType ", static_cast<int>(dtype));
}

TokenDType parse_token_dtype(const std::string& name, const std::string& what) {
  if (name == "uint16") return TokenDType::kU16;
  if (name == "uint32") return TokenDType::kU32;
  PSTAR_THROW(ConfigError, what, ": unknown token dtype '", name,
              "'; valid names are uint16, uint32");
}

size_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kU16:
      return 2;
    case TokenDType::kU32:
      return 4;
  }
  PSTAR_INTERNAL_ASSERT(false, "unhandled TokenDType ", static_cast<int>(dtype));
}

TokenFile::TokenFile(const std::string& path, TokenDType dtype) : file_(path), dtype_(dtype) {
  const size_t token_bytes = token_dtype_size(dtype);
  PSTAR_CHECK(file_.size() % token_bytes == 0, FormatError, "token file '", path, "' is ",
              file_.size(), " bytes, not a multiple of ", token_bytes, " (one ",
              token_dtype_name(dtype),
              " token); the file is truncated or was written with another dtype");
  num_tokens_ = static_cast<int64_t>(file_.size() / token_bytes);
}

uint32_t TokenFile::at(int64_t index) const {
  PSTAR_INTERNAL_ASSERT(index >= 0 && index < num_tokens_, "token index ", index,
                        " is out of range for token file '", path(), "' of ", num_tokens_,
                        " tokens");
  return load_token(file_.data() + static_cast<size_t>(index) * token_dtype_size(dtype_), dtype_);
}

uint32_t TokenFile::max_token() const {
  const size_t token_bytes = token_dtype_size(dtype_);
  const uint8_t* p = file_.data();
  uint32_t max = 0;
  for (int64_t i = 0; i < num_tokens_; ++i, p += token_bytes) {
    const uint32_t token = load_token(p, dtype_);
    if (token > max) max = token;
  }
  return max;
}

int64_t TokenFile::find_token_at_least(uint32_t limit) const {
  const size_t token_bytes = token_dtype_size(dtype_);
  const uint8_t* p = file_.data();
  for (int64_t i = 0; i < num_tokens_; ++i, p += token_bytes) {
    if (load_token(p, dtype_) >= limit) return i;
  }
  return -1;
}

TokenFileWriter::TokenFileWriter(const std::string& path, TokenDType dtype)
    : writer_(path), dtype_(dtype) {}

void TokenFileWriter::append(const uint32_t* tokens, size_t count) {
  const size_t token_bytes = token_dtype_size(dtype_);
  const uint32_t max = token_dtype_max(dtype_);
  buffer_.resize(count * token_bytes);
  uint8_t* p = buffer_.data();
  for (size_t i = 0; i < count; ++i, p += token_bytes) {
    const uint32_t token = tokens[i];
    PSTAR_CHECK(token <= max, ConfigError, "cannot write token file '", writer_.path(), "': token ",
                token, " at index ", count_ + static_cast<int64_t>(i), " does not fit ",
                token_dtype_name(dtype_), " (max ", max, "); use uint32");
    for (size_t b = 0; b < token_bytes; ++b) p[b] = static_cast<uint8_t>(token >> (8 * b));
  }
  writer_.append(buffer_.data(), buffer_.size());
  count_ += static_cast<int64_t>(count);
}

void write_token_file(const std::string& path, TokenDType dtype,
                      const std::vector<uint32_t>& tokens) {
  TokenFileWriter writer(path, dtype);
  writer.append(tokens);
  writer.commit();
}

}  // namespace pstar::formats
