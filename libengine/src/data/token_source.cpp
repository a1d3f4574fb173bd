#include "pstar/data/token_source.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "pstar/dist/communicator.h"
#include "pstar/formats/config.h"
#include "pstar/formats/token_file.h"
#include "pstar/text/token_cache.h"
#include "pstar/text/tokenizer.h"
#include "rank0_first.h"

namespace pstar::data {
namespace {

class TokenFileSource : public TokenSource {
 public:
  // `key` names the source in messages: "data.path", "data.eval.path", "data.text" (its cache).
  TokenFileSource(const std::string& path, formats::TokenDType dtype, std::string key)
      : file_(path, dtype), key_(std::move(key)) {}
  int64_t size() const override { return file_.size(); }
  void read(int64_t offset, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = file_.at(offset + i);
  }
  std::string describe() const override { return key_ + " " + file_.path(); }
  const formats::TokenFile& file() const { return file_; }

 private:
  formats::TokenFile file_;
  std::string key_;
};

// Bytes are tokens (vocab 256), so the file is read once into memory.
class TextSource : public TokenSource {
 public:
  TextSource(const std::string& path, std::string key) : path_(path), key_(std::move(key)) {
    std::error_code ec;
    PSTAR_CHECK(std::filesystem::is_regular_file(path, ec), IoError, key_, ": ", path,
                std::filesystem::exists(path, ec) ? " is not a regular file" : " does not exist",
                "; give a UTF-8 text file");
    std::ifstream in(path, std::ios::binary);
    PSTAR_CHECK(in.good(), IoError, key_, ": cannot open ", path, ": ", std::strerror(errno));
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    PSTAR_CHECK(!in.bad(), IoError, key_, ": error reading ", path);
  }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  void read(int64_t offset, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = bytes_[offset + i];
  }
  std::string describe() const override { return key_ + " " + path_; }
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
  std::string key_;
  std::vector<uint8_t> bytes_;
};

// Tokens [begin, begin + size) of a shared source: the two parts of data.eval_fraction.
class SliceSource : public TokenSource {
 public:
  SliceSource(std::shared_ptr<const TokenSource> base, int64_t begin, int64_t size,
              std::string what)
      : base_(std::move(base)), begin_(begin), size_(size), what_(std::move(what)) {}
  int64_t size() const override { return size_; }
  void read(int64_t offset, int64_t count, int64_t* out) const override {
    PSTAR_INTERNAL_ASSERT(offset >= 0 && offset + count <= size_, "read [", offset, ", ",
                          offset + count, ") outside a slice of ", size_, " tokens");
    base_->read(begin_ + offset, count, out);
  }
  std::string describe() const override {
    return str_cat(base_->describe(), " (", what_, ": tokens ", begin_, " to ", begin_ + size_,
                   ")");
  }

 private:
  std::shared_ptr<const TokenSource> base_;
  int64_t begin_, size_;
  std::string what_;
};

// Note [token cache on several ranks]
// Every rank opens the same data.text, so every rank would tokenize it and write the same cache.
// Rank 0 makes it alone; the others wait for it in a collective (which also tells them whether it
// failed, so that they stop with it rather than wait for a rank that is gone) and then find the
// file made (on a file system the ranks do not share, each makes its own: it is only a cache, and
// written atomically).
text::TokenCache token_cache_rank0_first(const text::Tokenizer& tokenizer, const std::string& text,
                                         dist::Communicator* comm) {
  return rank0_first(comm, "data.text " + text + ": rank 0 could not make its token cache",
                     [&] { return text::ensure_token_cache(tokenizer, text); });
}

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

// The source `prefix` ("data" or "data.eval") names: `data`'s path, dtype and text, with
// data.tokenizer.
std::unique_ptr<TokenSource> open_source(const config::DataConfig& data, int64_t vocab_size,
                                         int64_t seq_len, dist::Communicator* comm,
                                         const std::string& prefix) {
  PSTAR_CHECK(data.path.empty() != data.text.empty(), ConfigError, "data: set exactly one of ",
              prefix, ".path (a token file) and ", prefix, ".text (a text file)");
  if (!data.path.empty()) {
    auto source = std::make_unique<TokenFileSource>(
        data.path, formats::parse_token_dtype(data.dtype, prefix + ".dtype"), prefix + ".path");
    check_tokens(source->file(), *source, vocab_size, seq_len);
    return source;
  }
  if (!data.tokenizer.empty()) {
    // Note [token cache] in text/token_cache.h: tokenized once, then mapped at once.
    const text::Tokenizer tokenizer = text::Tokenizer::load(data.tokenizer);
    log::info("data.tokenizer: ", tokenizer.description());
    const text::TokenCache cache = token_cache_rank0_first(tokenizer, data.text, comm);
    log::info(
        cache.created ? prefix + ".text tokenized into " : prefix + ".text: reusing its tokens in ",
        cache.path);
    auto source = std::make_unique<TokenFileSource>(cache.path, cache.dtype, prefix + ".text");
    check_tokens(source->file(), *source, vocab_size, seq_len);
    return source;
  }
  auto source = std::make_unique<TextSource>(data.text, prefix + ".text");
  check_tokens(*source, *source, vocab_size, seq_len);
  return source;
}

}  // namespace

std::unique_ptr<TokenSource> open_token_source(const config::DataConfig& data, int64_t vocab_size,
                                               int64_t seq_len, dist::Communicator* comm) {
  PSTAR_CHECK(data.jsonl.empty(), ConfigError, "data.jsonl (", data.jsonl,
              ") holds records, which are sampled and packed as records "
              "(data::open_training_data), not read as token windows");
  return open_source(data, vocab_size, seq_len, comm, "data");
}

DataSources open_data_sources(const config::DataConfig& data, int64_t vocab_size, int64_t seq_len,
                              dist::Communicator* comm) {
  DataSources out;
  std::unique_ptr<TokenSource> whole = open_token_source(data, vocab_size, seq_len, comm);
  if (data.eval.set()) {
    // The held-out source is read like the training one: a text through the same tokenizer.
    config::DataConfig eval = data;
    eval.path = data.eval.path;
    eval.dtype = data.eval.dtype;
    eval.text = data.eval.text;
    out.eval = open_source(eval, vocab_size, seq_len, comm, "data.eval");
  }
  if (!data.eval_fraction) {
    out.train = std::move(whole);
    return out;
  }
  const double fraction = *data.eval_fraction;
  const int64_t n = whole->size();
  const auto held = static_cast<int64_t>(std::floor(fraction * static_cast<double>(n)));
  const int64_t kept = n - held;
  PSTAR_CHECK(held >= seq_len + 1 && kept >= seq_len + 1, ConfigError, "data.eval_fraction ",
              fraction, ": of ", whole->describe(), "'s ", n, " tokens it holds out ", held,
              " and leaves ", kept,
              " for training; each part needs at least model.seq_len + 1 = ", seq_len + 1,
              " tokens (one window); ",
              held < seq_len + 1 ? "raise data.eval_fraction" : "lower data.eval_fraction",
              ", or use more data");
  std::shared_ptr<const TokenSource> base(std::move(whole));
  out.train = std::make_unique<SliceSource>(base, 0, kept, "training part");
  out.eval = std::make_unique<SliceSource>(base, kept, held, "held out by data.eval_fraction");
  return out;
}

}  // namespace pstar::data
