// Record sources: data.jsonl through its record cache, validated (record_source.h).
#include "pstar/data/record_source.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/formats/record_file.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/records.h"
#include "pstar/text/tokenizer.h"
#include "rank0_first.h"

namespace pstar::data {
namespace {

using FilePtr = std::shared_ptr<const formats::RecordFile>;

text::RecordOptions record_options(const config::DataConfig& data) {
  text::RecordOptions o;
  o.loss_on = data.loss_on;
  o.date = data.chat_date;
  o.template_kwargs = data.chat_template_kwargs;
  o.skip_bad_records = data.skip_bad_records;
  return o;
}

// What the tokenizer and the template of data.jsonl are, loaded once for both files.
struct Preparation {
  text::Tokenizer tokenizer;
  std::unique_ptr<text::ChatTemplate> chat;
  std::string no_template;  // why there is no template, when chat is null
  text::RecordOptions options;
};

// `key` ("data.jsonl", "data.eval.jsonl") names the file in messages.
FilePtr open_file(const std::string& key, const std::string& jsonl, const Preparation& p,
                  dist::Communicator* comm) {
  std::error_code ec;
  PSTAR_CHECK(std::filesystem::is_regular_file(jsonl, ec), IoError, key, ": ", jsonl,
              std::filesystem::exists(jsonl, ec) ? " is not a regular file" : " does not exist",
              "; give a JSON Lines file of records");
  // Progress every 5 s of a large file's tokenizing (a few seconds per 50 MB at 10 MB/s).
  auto last = std::chrono::steady_clock::now();
  const auto progress = [&](int64_t done) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(5)) return;
    last = now;
    log::info(key, ": ", format_count(static_cast<double>(done)), "B of ", jsonl, " tokenized");
  };
  const text::RecordCache cache =
      rank0_first(comm, key + " " + jsonl + ": rank 0 could not make its record cache", [&] {
        return text::ensure_record_cache(p.tokenizer, p.chat.get(), p.no_template, jsonl, p.options,
                                         key, progress);
      });
  log::info(cache.created ? key + " tokenized into " : key + ": reusing its records in ",
            cache.path);
  const std::string summary = key + ": " + cache.stats.summary();
  if (cache.stats.skipped_total() > 0) {
    log::warn(summary, " (data.skip_bad_records)");
  } else {
    log::info(summary);
  }
  return std::make_shared<const formats::RecordFile>(cache.path);
}

// Every id below vocab_size; records longer than seq_len + 1 cut (counted) or refused.
void validate(const std::string& key, const std::string& jsonl, const formats::RecordFile& file,
              const config::DataConfig& data, int64_t vocab_size, int64_t seq_len) {
  int64_t longer = 0, short_records = 0;
  std::vector<uint32_t> tokens;
  for (int64_t r = 0; r < file.records(); ++r) {
    const int64_t n = file.size(r);
    if (n > seq_len + 1) {
      PSTAR_CHECK(data.truncate, ConfigError, key, " ", jsonl, " line ", file.line(r),
                  ": the record has ", n, " tokens, more than model.seq_len + 1 = ", seq_len + 1,
                  "; set data.truncate to true to cut such records to their first ", seq_len + 1,
                  " tokens (counted in the log), or raise model.seq_len");
      ++longer;
    }
    if (n < 2) ++short_records;
    tokens.resize(static_cast<size_t>(n));
    file.read(r, 0, n, tokens.data());
    for (int64_t k = 0; k < n; ++k) {
      const uint32_t id = formats::record_token_id(tokens[static_cast<size_t>(k)]);
      PSTAR_CHECK(static_cast<int64_t>(id) < vocab_size, ConfigError, key, " ", jsonl, " line ",
                  file.line(r), ": token id ", id, " (token ", k, " of the record) is not below ",
                  "model.vocab_size ", vocab_size,
                  "; the tokenizer's vocabulary is larger than the model's: use the model's own "
                  "tokenizer, or raise model.vocab_size");
    }
  }
  if (longer > 0) {
    log::warn(key, ": ", longer, " records are longer than model.seq_len + 1 = ", seq_len + 1,
              " tokens and are cut to their first ", seq_len + 1, " (data.truncate)");
  }
  if (short_records > 0) {
    log::info(key, ": ", short_records,
              " records of fewer than 2 tokens give no target and are never sampled");
  }
}

int64_t usable(const formats::RecordFile& file, int64_t begin, int64_t end) {
  int64_t n = 0;
  for (int64_t r = begin; r < end; ++r) n += file.size(r) >= 2 ? 1 : 0;
  return n;
}

}  // namespace

RecordSource::RecordSource(FilePtr file, int64_t begin, int64_t count, std::string what)
    : file_(std::move(file)), begin_(begin), count_(count), what_(std::move(what)) {
  PSTAR_INTERNAL_ASSERT(begin >= 0 && count >= 0 && begin + count <= file_->records());
}

int64_t RecordSource::size(int64_t r) const {
  PSTAR_INTERNAL_ASSERT(r >= 0 && r < count_, "record ", r, " of ", count_);
  return file_->size(begin_ + r);
}

void RecordSource::read(int64_t r, int64_t begin, int64_t count, uint32_t* out) const {
  PSTAR_INTERNAL_ASSERT(r >= 0 && r < count_, "record ", r, " of ", count_);
  file_->read(begin_ + r, begin, count, out);
}

int64_t RecordSource::line(int64_t r) const {
  PSTAR_INTERNAL_ASSERT(r >= 0 && r < count_, "record ", r, " of ", count_);
  return file_->line(begin_ + r);
}

int64_t RecordSource::tokens() const {
  return count_ == 0 ? 0 : file_->offset(begin_ + count_) - file_->offset(begin_);
}

RecordSources open_record_sources(const config::DataConfig& data, int64_t vocab_size,
                                  int64_t seq_len, dist::Communicator* comm) {
  PSTAR_CHECK(!data.jsonl.empty(), ConfigError, "data: data.jsonl is not set");
  PSTAR_CHECK(!data.tokenizer.empty(), ConfigError,
              "data.jsonl needs data.tokenizer (the model's tokenizer)");
  Preparation p{text::Tokenizer::load(data.tokenizer), nullptr, "", record_options(data)};
  log::info("data.tokenizer: ", p.tokenizer.description());
  p.chat = text::load_record_template(data.tokenizer, data.chat_template, &p.no_template);
  if (p.chat != nullptr) log::info("data.jsonl: chat template ", p.chat->origin());

  RecordSources out;
  const FilePtr file = open_file("data.jsonl", data.jsonl, p, comm);
  validate("data.jsonl", data.jsonl, *file, data, vocab_size, seq_len);
  const int64_t n = file->records();
  if (!data.eval.jsonl.empty()) {
    const FilePtr eval = open_file("data.eval.jsonl", data.eval.jsonl, p, comm);
    validate("data.eval.jsonl", data.eval.jsonl, *eval, data, vocab_size, seq_len);
    PSTAR_CHECK(usable(*eval, 0, eval->records()) > 0, ConfigError, "data.eval.jsonl ",
                data.eval.jsonl, " has no record of 2 tokens or more (one input and its target)");
    out.eval = std::make_unique<RecordSource>(eval, 0, eval->records(),
                                              "data.eval.jsonl " + data.eval.jsonl);
  }
  if (!data.eval_fraction) {
    PSTAR_CHECK(usable(*file, 0, n) > 0, ConfigError, "data.jsonl ", data.jsonl,
                " has no record of 2 tokens or more (one input and its target)");
    out.train = std::make_unique<RecordSource>(file, 0, n, "data.jsonl " + data.jsonl);
    return out;
  }
  const double fraction = *data.eval_fraction;
  const auto held = static_cast<int64_t>(std::floor(fraction * static_cast<double>(n)));
  const int64_t kept = n - held;
  const int64_t kept_usable = usable(*file, 0, kept), held_usable = usable(*file, kept, n);
  PSTAR_CHECK(kept_usable > 0 && held_usable > 0, ConfigError, "data.eval_fraction ", fraction,
              ": of data.jsonl ", data.jsonl, "'s ", n, " records it holds out ", held, " (",
              held_usable, " of 2 tokens or more) and leaves ", kept, " (", kept_usable,
              ") for training; each part needs at least one record of 2 tokens or more; ",
              held_usable == 0 ? "raise data.eval_fraction" : "lower data.eval_fraction",
              ", or use more records");
  out.train = std::make_unique<RecordSource>(
      file, 0, kept,
      str_cat("data.jsonl ", data.jsonl, " (training part: records 0 to ", kept, ")"));
  out.eval = std::make_unique<RecordSource>(
      file, kept, held,
      str_cat("data.jsonl ", data.jsonl, " (held out by data.eval_fraction: records ", kept, " to ",
              n, ")"));
  return out;
}

}  // namespace pstar::data
