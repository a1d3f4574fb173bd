// Token data: a flat binary file of little-endian token ids (uint16 or uint32), memory-mapped.
// Any tokenizer can produce it; tools/pstar-tokenize makes one from text (bytes as tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pstar/formats/mapped_file.h"

namespace pstar::formats {

enum class TokenDType { kU16, kU32 };

// "uint16" / "uint32"; throws ConfigError naming `what` and the valid names otherwise.
TokenDType parse_token_dtype(const std::string& name, const std::string& what);
size_t token_dtype_size(TokenDType dtype);
// "uint16" / "uint32".
const char* token_dtype_name(TokenDType dtype);

class TokenFile {
 public:
  // Throws IoError if unreadable, FormatError if its size is not a whole number of tokens.
  TokenFile(const std::string& path, TokenDType dtype);

  const std::string& path() const { return file_.path(); }
  int64_t size() const { return num_tokens_; }
  uint32_t at(int64_t index) const;
  // The largest token id in the file (a full scan; 0 for an empty file).
  uint32_t max_token() const;
  // Index of the first token >= limit, or -1.
  int64_t find_token_at_least(uint32_t limit) const;

 private:
  MappedFile file_;
  TokenDType dtype_;
  int64_t num_tokens_ = 0;
};

// Writes a token file piece by piece, so that it never has to be in memory whole (tokenizers):
// through AtomicFileWriter, so nothing is published before commit() and an error on the way
// leaves `path` as it was.
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, TokenDType dtype);
  // Throws ConfigError naming the token and its index if one does not fit the dtype.
  void append(const uint32_t* tokens, size_t count);
  void append(const std::vector<uint32_t>& tokens) { append(tokens.data(), tokens.size()); }
  int64_t size() const { return count_; }  // tokens appended
  uint64_t size_bytes() const { return writer_.size_bytes(); }
  TokenDType dtype() const { return dtype_; }
  void commit() { writer_.commit(); }

 private:
  AtomicFileWriter writer_;
  TokenDType dtype_;
  int64_t count_ = 0;
  std::vector<uint8_t> buffer_;
};

// Writes tokens atomically; throws ConfigError if a token does not fit the dtype.
void write_token_file(const std::string& path, TokenDType dtype,
                      const std::vector<uint32_t>& tokens);

}  // namespace pstar::formats
