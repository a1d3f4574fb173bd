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
namespace pstar::dist {
class Communicator;
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
// With several ranks (`comm`), a text's token cache is made by rank 0 alone and read by the
// others after it (Note [token cache on several ranks] in token_source.cpp). With
// data.eval_fraction this is the whole source: open_data_sources cuts it.
std::unique_ptr<TokenSource> open_token_source(const config::DataConfig& data, int64_t vocab_size,
                                               int64_t seq_len, dist::Communicator* comm = nullptr);

// The training source and the held-out one (docs/data.md#held-out-data).
struct DataSources {
  std::unique_ptr<TokenSource> train;
  // data.eval opened like the training source (its text through data.tokenizer), or the last
  // data.eval_fraction of the training source; null when neither is set.
  std::unique_ptr<TokenSource> eval;
};

// Opens both. With data.eval_fraction f the training source is its first N - floor(f·N) tokens
// (so a sampler never draws a window that reaches the held-out part) and the held-out source the
// rest; without it the training source is exactly what open_token_source returns. ConfigError
// naming the key and its value when either part is shorter than one window (seq_len + 1 tokens).
DataSources open_data_sources(const config::DataConfig& data, int64_t vocab_size, int64_t seq_len,
                              dist::Communicator* comm = nullptr);

}  // namespace pstar::data
