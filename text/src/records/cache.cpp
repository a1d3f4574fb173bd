// Record files of JSON Lines files: the stats kept in them, the cache's name and making it
// (records.h; Note [token cache] in token_cache.h for the naming).
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checksum.h"
#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/formats/record_file.h"
#include "pstar/text/records.h"
#include "records/parse.h"

namespace pstar::text {
namespace {

using Json = nlohmann::json;

// Part of every cache key: a new version of the masking rules makes new files. 2: messages'
// reasoning_content is read (it was ignored), and the template's kwargs are part of the key.
constexpr std::string_view kRecordsVersion = "pstar records 2";

}  // namespace

int64_t RecordStats::skipped_total() const {
  int64_t n = 0;
  for (const auto& [kind, count] : skipped) n += count;
  return n;
}

std::string RecordStats::to_json() const {
  Json j = {{"lines", lines},
            {"blank_lines", blank_lines},
            {"conversations", conversations},
            {"pairs", pairs},
            {"texts", texts},
            {"no_assistant", no_assistant},
            {"empty_turns_uncounted", empty_turns_uncounted},
            {"tokens", tokens},
            {"counted", counted},
            {"bytes", bytes},
            {"skipped", skipped}};
  return j.dump();
}

RecordStats RecordStats::from_json(const std::string& json, const std::string& origin) {
  RecordStats s;
  try {
    const Json j = Json::parse(json);
    s.lines = j.at("lines").get<int64_t>();
    s.blank_lines = j.at("blank_lines").get<int64_t>();
    s.conversations = j.at("conversations").get<int64_t>();
    s.pairs = j.at("pairs").get<int64_t>();
    s.texts = j.at("texts").get<int64_t>();
    s.no_assistant = j.at("no_assistant").get<int64_t>();
    s.empty_turns_uncounted = j.at("empty_turns_uncounted").get<int64_t>();
    s.tokens = j.at("tokens").get<int64_t>();
    s.counted = j.at("counted").get<int64_t>();
    s.bytes = j.at("bytes").get<int64_t>();
    s.skipped = j.at("skipped").get<std::map<std::string, int64_t>>();
  } catch (const Json::exception& e) {
    PSTAR_THROW(FormatError, origin, ": its metadata is not pstar's record statistics (", e.what(),
                "); delete the file to make it again");
  }
  return s;
}

std::string RecordStats::summary() const {
  std::string shapes;
  auto add = [&](int64_t n, const char* what) {
    if (n == 0) return;
    shapes += str_cat(shapes.empty() ? "" : ", ", n, " ", what);
  };
  add(conversations, "conversations");
  add(pairs, "prompt/completion pairs");
  add(texts, "texts");
  std::string out = str_cat(records(), " records", shapes.empty() ? "" : " (" + shapes + ")", ", ",
                            format_count(static_cast<double>(tokens)), " tokens (",
                            format_count(static_cast<double>(counted)), " counted in the loss)");
  if (no_assistant > 0)
    out +=
        str_cat("; ", no_assistant, " conversations without an assistant turn (nothing counted)");
  if (empty_turns_uncounted > 0)
    out += str_cat("; ", empty_turns_uncounted,
                   " empty assistant turns whose end-of-turn token could not be placed (not "
                   "counted)");
  if (!skipped.empty()) {
    std::string kinds;
    for (const auto& [kind, count] : skipped)
      kinds += str_cat(kinds.empty() ? "" : ", ", count, " ", kind);
    out += str_cat("; skipped ", skipped_total(), " bad records (", kinds, ")");
  }
  if (blank_lines > 0) out += str_cat("; ", blank_lines, " blank lines");
  return out;
}

std::unique_ptr<ChatTemplate> load_record_template(const std::string& tokenizer_path,
                                                   const std::string& template_path,
                                                   std::string* error) {
  // An explicit template must load; the tokenizer's own may be missing, which matters only when
  // a record is a conversation (records of prompts or texts need none).
  if (!template_path.empty())
    return std::make_unique<ChatTemplate>(ChatTemplate::load(template_path));
  try {
    return std::make_unique<ChatTemplate>(ChatTemplate::load(tokenizer_path));
  } catch (const Error& e) {
    *error = e.what();
    return nullptr;
  }
}

std::string record_cache_path(const Tokenizer& tokenizer, const ChatTemplate* chat,
                              const std::string& jsonl_path, const RecordOptions& options) {
  uint64_t h = kFnvOffset;
  fnv1a_field(h, kRecordsVersion);
  fnv1a_field(h, tokenizer.fingerprint());
  fnv1a_field(h, chat != nullptr ? chat->source() : "");
  fnv1a_field(h, chat != nullptr ? chat->bos_token() + "\n" + chat->eos_token() : "");
  fnv1a_field(h, config::loss_on_name(options.loss_on));
  fnv1a_field(h, options.date);
  fnv1a_field(h, options.template_kwargs);
  fnv1a_field(h, options.skip_bad_records ? "skip" : "");
  const formats::MappedFile jsonl(jsonl_path);
  fnv1a(h, jsonl.data(), jsonl.size());
  char key[17];
  std::snprintf(key, sizeof(key), "%016llx", static_cast<unsigned long long>(h));
  return jsonl_path + ".pstar-" + key + ".records";
}

RecordCache ensure_record_cache(const Tokenizer& tokenizer, const ChatTemplate* chat,
                                const std::string& no_template, const std::string& jsonl_path,
                                const RecordOptions& options, const std::string& key,
                                const std::function<void(int64_t)>& progress) {
  RecordCache cache;
  cache.path = record_cache_path(tokenizer, chat, jsonl_path, options);
  struct stat st {};
  if (::stat(cache.path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    const formats::RecordFile file(cache.path);
    cache.stats = RecordStats::from_json(file.metadata(), cache.path);
    return cache;
  }
  const formats::MappedFile jsonl(jsonl_path);
  const auto* data = reinterpret_cast<const char*>(jsonl.data());
  const size_t size = jsonl.size();
  RecordStats& stats = cache.stats;
  stats.bytes = static_cast<int64_t>(size);
  RecordTokenizer tokenizer_of_records(
      tokenizer, chat, options,
      str_cat("it is a conversation, but there is no chat template to render it with: ",
              no_template, "; set data.chat_template to a tokenizer_config.json with one"));
  formats::RecordFileWriter writer(cache.path);
  std::vector<uint32_t> tokens;
  size_t next_progress = size_t{1} << 20;
  for (size_t pos = 0; pos < size;) {
    const void* newline = std::memchr(data + pos, '\n', size - pos);
    const size_t end =
        newline != nullptr ? static_cast<size_t>(static_cast<const char*>(newline) - data) : size;
    std::string_view line(data + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end + 1;
    const int64_t number = ++stats.lines;
    if (progress && pos >= next_progress) {
      progress(static_cast<int64_t>(std::min(pos, size)));
      next_progress = pos + (size_t{1} << 20);
    }
    if (records::is_blank(line)) {
      ++stats.blank_lines;
      continue;
    }
    if (auto bad = tokenizer_of_records.tokenize(line, tokens, stats)) {
      PSTAR_CHECK(options.skip_bad_records, FormatError, key, " ", jsonl_path, " line ", number,
                  ": ", bad->message,
                  " (set data.skip_bad_records to skip bad records and count them instead)");
      ++stats.skipped[bad->kind];
      continue;
    }
    writer.add(tokens, number);
  }
  writer.commit(stats.to_json());
  cache.created = true;
  return cache;
}

}  // namespace pstar::text
