// Where records come from: a JSON Lines file (data.jsonl) tokenized at start-up into a record
// file (text/records.h, formats/record_file.h) whose tokens say whether they count in the loss.
// Everything that can be wrong with the records is found here, before training starts.
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
namespace pstar::formats {
class RecordFile;
}

namespace pstar::data {

// Records [begin, begin + count) of a record file, numbered from 0 here.
class RecordSource {
 public:
  // `what` names the source in messages: "data.jsonl /x/chat.jsonl" (plus the part it is).
  RecordSource(std::shared_ptr<const formats::RecordFile> file, int64_t begin, int64_t count,
               std::string what);
  int64_t records() const { return count_; }
  // Tokens of record r (0 <= r < records()), as formats::record_token() made them.
  int64_t size(int64_t r) const;
  void read(int64_t r, int64_t begin, int64_t count, uint32_t* out) const;
  // The line of the JSON Lines file record r came from (1-based).
  int64_t line(int64_t r) const;
  int64_t tokens() const;  // over its records
  std::string describe() const { return what_; }

 private:
  std::shared_ptr<const formats::RecordFile> file_;
  int64_t begin_, count_;
  std::string what_;
};

// The training records and the held-out ones (docs/data.md#records).
struct RecordSources {
  std::unique_ptr<RecordSource> train;
  // data.eval.jsonl, or the last data.eval_fraction of the training file's records; null when
  // neither is set.
  std::unique_ptr<RecordSource> eval;
};

// Opens data.jsonl (and data.eval.jsonl) through data.tokenizer and the chat template into their
// record caches (rank 0 first with several ranks, Note [token cache on several ranks]), logging
// what each holds, and validates them: every id below vocab_size and, unless data.truncate, no
// record longer than seq_len + 1 tokens (ConfigError naming the file, the line and the key);
// each part at least one record of two tokens or more (one input and its target). With
// data.eval_fraction f the held-out part is the last floor(f·R) of the file's R records.
RecordSources open_record_sources(const config::DataConfig& data, int64_t vocab_size,
                                  int64_t seq_len, dist::Communicator* comm = nullptr);

}  // namespace pstar::data
