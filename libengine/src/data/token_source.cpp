#include "pstar/data/token_source.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/formats/token_file.h"
#include "pstar/text/token_cache.h"
#include "pstar/text/tokenizer.h"

namespace pstar::data {
namespace {

class TokenFileSource : public TokenSource {
 public:
  TokenFileSource(const std::string& path, formats::TokenDType dtype) : file_(path, dtype) {}
  int64_t size() const override { return file_.size(); }
  void read(int64_t offset, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = file_.at(offset + i);
  }
  std::string describe() const override { return "data.path " + file_.path(); }
  const formats::TokenFile& file() const { return file_; }

 private:
  formats::TokenFile file_;
};

// Bytes are tokens (vocab 256), so the file is read once into memory.
class TextSource : public TokenSource {
 public:
  explicit TextSource(const std::string& path) : path_(path) {
    std::error_code ec;
    PSTAR_CHECK(std::filesystem::is_regular_file(path, ec), IoError, "data.text: ", path,
                std::filesystem::exists(path, ec) ? " is not a regular file" : " does not exist",
                "; give a UTF-8 text file");
    std::ifstream in(path, std::ios::binary);
    PSTAR_CHECK(in.good(), IoError, "data.text: cannot open ", path, ": ", std::strerror(errno));
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    PSTAR_CHECK(!in.bad(), IoError, "data.text: error reading ", path);
  }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  void read(int64_t offset, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = bytes_[offset + i];
  }
  std::string describe() const override { return "data.text " + path_; }
  uint32_t max_token() const {
    uint32_t m = 0;
    for (uint8_t b : bytes_) m = std::max<uint32_t>(m, b);
    return m;
  }
  int64_t find_token_at_least(uint32_t limit) const {
    for (size_t i = 0; i < bytes_.size(); ++i)
      if (bytes_[i] >= limit) return static_cast<int64_t>(i);
    return -1;
  }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
};

template <typename Source>
void check_tokens(const Source& source, const TokenSource& base, int64_t vocab_size,
                  int64_t seq_len) {
  PSTAR_CHECK(base.size() >= seq_len + 1, ConfigError, base.describe(), " has ", base.size(),
              " tokens, fewer than model.seq_len + 1 = ", seq_len + 1,
              " needed for one sample; use more data or a shorter model.seq_len");
  const int64_t bad = source.find_token_at_least(
      static_cast<uint32_t>(std::min<int64_t>(vocab_size, std::numeric_limits<uint32_t>::max())));
  if (bad >= 0) {
    int64_t token = 0;
    base.read(bad, 1, &token);
    PSTAR_THROW(ConfigError, base.describe(), ": token id ", token, " at index ", bad,
                " is not below model.vocab_size ", vocab_size, " (the largest id is ",
                source.max_token(), "); raise model.vocab_size or fix the tokenizer output");
  }
}

}  // namespace

std::unique_ptr<TokenSource> open_token_source(const config::DataConfig& data, int64_t vocab_size,
                                               int64_t seq_len) {
  PSTAR_CHECK(data.path.empty() != data.text.empty(), ConfigError,
              "data: set exactly one of data.path (a token file) and data.text (a text file)");
  if (!data.path.empty()) {
    auto source = std::make_unique<TokenFileSource>(
        data.path, formats::parse_token_dtype(data.dtype, "data.dtype"));
    check_tokens(source->file(), *source, vocab_size, seq_len);
    return source;
  }
  if (!data.tokenizer.empty()) {
    // Note [token cache] in text/token_cache.h: tokenized once, then mapped at once.
    const text::Tokenizer tokenizer = text::Tokenizer::load(data.tokenizer);
    log::info("data.tokenizer: ", tokenizer.description());
    const text::TokenCache cache = text::ensure_token_cache(tokenizer, data.text);
    log::info(cache.created ? "data.text tokenized into " : "data.text: reusing its tokens in ",
              cache.path);
    auto source = std::make_unique<TokenFileSource>(cache.path, cache.dtype);
    check_tokens(source->file(), *source, vocab_size, seq_len);
    return source;
  }
  auto source = std::make_unique<TextSource>(data.text);
  check_tokens(*source, *source, vocab_size, seq_len);
  return source;
}

}  // namespace pstar::data
