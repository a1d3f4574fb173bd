// JSON Lines records tokenized for fine-tuning: conversations through the model's own chat
// template, prompt/completion pairs and plain texts, each token flagged with whether it counts in
// the loss; what data.jsonl becomes (a record file, formats/record_file.h) at start-up.
//
// Note [record masks]
// A record is one line of the file, an object of one of three shapes, decided per line:
//   {"messages": [{"role": ..., "content": ...}, ...]}  roles system, user, assistant; a message
//                                                      may add "reasoning_content" (a string)
//   {"prompt": ..., "completion": ...}
//   {"text": ...}
// (other keys of the object are ignored). A conversation is rendered with the chat template
// (add_generation_prompt false) and the WHOLE text tokenized with the tokenizer, so the ids are
// those Hugging Face gives for apply_chat_template's text. Which tokens count (loss_on):
//   assistant:      a token counts when its bytes overlap the content of an assistant message
//                   (the template's byte spans, Note [string origins]), and so does the first
//                   token after each such content when it is an added special token: the end of
//                   the turn (<|eot_id|>, <|im_end|>), which the model must learn to emit;
//   last_assistant: the same for the last assistant message only;
//   all:            every token of every record.
// A token's bytes come from the token texts (Note [token offsets] in tokenizer.h); their
// spelling must equal the normalized text, else the record is refused (never a wrong mask). An
// assistant message whose content leaves no bytes (empty, or trimmed away by the template) is
// placed by rendering it again with a marker for its content: when removing the marker gives the
// same text back, its end-of-turn token counts; otherwise nothing of it counts, and the record's
// turn is counted in the stats. A conversation without an assistant turn is kept with nothing
// counted (and counted in the stats).
// A pair is prompt + completion as one text, the prefix token (Tokenizer::prefix_id) before it
// when the tokenizer's post-processor adds one, the end-of-text token (eos) after; the completion's
// tokens (those overlapping its bytes) and the eos count. A text is the prefix, the text and eos,
// all counting. loss_on "all" makes every token of every shape count.
// A bad record (a line that is not JSON, not an object, of no known shape, with a field of the
// wrong type, an unknown role, invalid UTF-8, or one the template refuses) is a FormatError naming
// the file, the 1-based line and the field, or with skip_bad_records skipped and counted by kind.
// Blank lines are skipped and counted.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pstar/formats/config.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/tokenizer.h"

namespace pstar::text {

// Which tokens count in the loss: data.loss_on (Note [record masks]).
using LossOn = config::LossOn;

struct RecordOptions {
  LossOn loss_on = LossOn::kAssistant;
  std::string date;  // ChatOptions::date for the template's strftime_now ("" leaves it undefined)
  std::string template_kwargs;  // ChatOptions::template_kwargs (data.chat_template_kwargs)
  bool skip_bad_records = false;
};

// What a file's records came to; kept in the record file's metadata so that a run reusing the
// cache logs the same.
struct RecordStats {
  int64_t lines = 0;  // lines read
  int64_t blank_lines = 0;
  int64_t conversations = 0, pairs = 0, texts = 0;  // records kept, by shape
  int64_t no_assistant = 0;           // conversations without an assistant turn (nothing counts)
  int64_t empty_turns_uncounted = 0;  // assistant turns with no bytes and no end-of-turn found
  int64_t tokens = 0;                 // over the records kept
  int64_t counted = 0;  // targets that count (tokens 1 .. n-1 of each record with the loss bit)
  int64_t bytes = 0;    // of the file
  std::map<std::string, int64_t> skipped;  // bad records skipped, by kind ("not JSON", ...)

  int64_t records() const { return conversations + pairs + texts; }
  int64_t skipped_total() const;
  std::string to_json() const;
  // FormatError naming `origin` when `json` is not what to_json() writes.
  static RecordStats from_json(const std::string& json, const std::string& origin);
  // One line for logs: "1204 records (1200 conversations, 4 texts), 812.4k tokens (301.2k
  // counted); skipped 3 bad records (2 not JSON, 1 unknown role)".
  std::string summary() const;
};

// A bad record: `kind` for counting ("not JSON", "not an object", "unknown shape", "wrong type",
// "unknown role", "invalid UTF-8", "template refused"), `message` naming the field.
struct BadRecord {
  std::string kind;
  std::string message;
};

// Turns one record (a line's text) into tokens made with formats::record_token(). Not thread-safe
// (it keeps the tokenizer's BPE cache warm across records); one per thread.
class RecordTokenizer {
 public:
  // `chat` may be null: a conversation is then a bad record saying why (`no_template`).
  RecordTokenizer(const Tokenizer& tokenizer, const ChatTemplate* chat, RecordOptions options,
                  std::string no_template = "");
  ~RecordTokenizer();
  RecordTokenizer(const RecordTokenizer&) = delete;
  RecordTokenizer& operator=(const RecordTokenizer&) = delete;

  // The tokens of the record on `line`, or the reason it is bad. Blank lines are not records (the
  // caller skips them). `stats` gains the record's shape and counts.
  std::optional<BadRecord> tokenize(std::string_view line, std::vector<uint32_t>& out,
                                    RecordStats& stats);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

struct RecordCache {
  std::string path;      // the record file
  bool created = false;  // made by this call (false: it was there)
  RecordStats stats;
};

// The chat template for records: the tokenizer_config.json at `template_path`, or beside the
// tokenizer when empty. Without one, `error` says why and the result is null.
std::unique_ptr<ChatTemplate> load_record_template(const std::string& tokenizer_path,
                                                   const std::string& template_path,
                                                   std::string* error);

// The cache of `jsonl_path`: "JSONL.pstar-<key>.records" beside it, <key> a checksum of the
// tokenizer's files, the template's source, the options and the file's bytes (Note [token cache]).
std::string record_cache_path(const Tokenizer& tokenizer, const ChatTemplate* chat,
                              const std::string& jsonl_path, const RecordOptions& options);

// The record file of `jsonl_path`, made first when absent: every line tokenized (a bad record a
// FormatError naming `key` ("data.jsonl"), the file, the line and the field, unless
// options.skip_bad_records), written atomically. `progress` is called after each 1 MiB of input.
RecordCache ensure_record_cache(const Tokenizer& tokenizer, const ChatTemplate* chat,
                                const std::string& no_template, const std::string& jsonl_path,
                                const RecordOptions& options, const std::string& key,
                                const std::function<void(int64_t bytes_done)>& progress = {});

}  // namespace pstar::text
