// Where training tokens come from: a token file (data.path, memory-mapped) or a UTF-8 text file
// (data.text, one token per byte). Everything that can be wrong with the data is found here,
// before training starts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace pstar::config {
struct DataConfig;
}

namespace pstar::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;
  // Copies tokens [offset, offset + count) into out; the range must be inside the source.
  virtual void read(int64_t offset, int64_t count, int64_t* out) const = 0;
  // e.g. "data.path /data/tokens.bin", for messages.
  virtual std::string describe() const = 0;
};

// Opens and validates the configured source: readable (IoError), at least seq_len + 1 tokens and
// every token id < vocab_size (ConfigError naming the key, the file and the offending value).
std::unique_ptr<TokenSource> open_token_source(const config::DataConfig& data, int64_t vocab_size,
                                               int64_t seq_len);

}  // namespace pstar::data
