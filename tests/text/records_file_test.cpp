// ensure_record_cache: a JSON Lines file's records written once beside it and found again, never
// stale; every kind of bad record an error naming the file, the line and the field, or skipped
// and counted.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/formats/record_file.h"
#include "pstar/text/records.h"
#include "record_fixtures.h"
#include "test_util.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using pstar::testing::message_of;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;
using testing::small_template;
using testing::small_tokenizer;

const std::string kGood = R"({"messages": [{"role": "user", "content": "Hello"},)"
                          R"( {"role": "assistant", "content": "Paris"}]})";

RecordCache make(const std::string& jsonl, const RecordOptions& options = {}) {
  const Tokenizer t = small_tokenizer();
  const ChatTemplate chat = small_template();
  return ensure_record_cache(t, &chat, "", jsonl, options, "data.jsonl");
}

// Each bad line, the kind it is counted as, and what its message must say (the field).
struct BadLine {
  std::string line, kind, says;
};

const std::vector<BadLine>& bad_lines() {
  static const std::vector<BadLine> lines = {
      {R"({"messages": [)", "not JSON", "not JSON: column"},
      {R"({"text": 1e999})", "not JSON", "not JSON: number overflow"},  // found by records_fuzz
      {R"(["a", "b"])", "not an object", "the line is a list, expected an object"},
      {R"({"conversation": []})", "unknown shape", "has none of \"messages\""},
      {R"({"text": "a", "prompt": "b", "completion": "c"})", "unknown shape",
       "has more than one of"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "unknown role",
       "messages[0].role is \"tool\"; the roles allowed are \"system\", \"user\" and "
       "\"assistant\""},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": null}]})",
       "content not a string", "messages[1].content is null, expected a string"},
      {R"({"messages": [{"role": "user", "content": ["a"]}]})", "content not a string",
       "messages[0].content is a list, expected a string"},
      {R"({"messages": [{"role": "user"}]})", "content not a string", "messages[0] has no content"},
      {R"({"messages": [{"content": "a"}]})", "missing field", "messages[0] has no role"},
      {R"({"messages": "hi"})", "wrong type", "messages is the string \"hi\", expected a list"},
      {R"({"messages": [3]})", "wrong type", "messages[0] is the number 3, expected an object"},
      {R"({"prompt": "a"})", "missing field", "has no \"completion\""},
      {R"({"prompt": "a", "completion": 5})", "wrong type", "completion is the number 5"},
      {R"({"text": true})", "wrong type", "text is the boolean true, expected a string"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xE9\"}]}", "invalid UTF-8",
       "invalid UTF-8 at byte 47 of the line (in messages[0].content)"},
  };
  return lines;
}

TEST(RecordFile, WrittenOnceBesideTheFileThenReused) {
  ScratchDir dir;
  const std::string jsonl = dir.file("chat.jsonl");
  write_text(jsonl, kGood + "\n\n" + R"({"text": "Paris is the capital."})" + "\r\n" +
                        R"({"prompt": "Q", "completion": "A"})");  // no final newline
  const RecordCache first = make(jsonl);
  EXPECT_TRUE(first.created);
  EXPECT_EQ(first.path.rfind(jsonl + ".pstar-", 0), 0u) << first.path;
  EXPECT_EQ(first.path.substr(first.path.size() - 8), ".records");
  EXPECT_EQ(first.stats.lines, 4);
  EXPECT_EQ(first.stats.blank_lines, 1);
  EXPECT_EQ(first.stats.records(), 3);
  EXPECT_EQ(first.stats.conversations, 1);
  EXPECT_EQ(first.stats.texts, 1);
  EXPECT_EQ(first.stats.pairs, 1);

  const formats::RecordFile file(first.path);
  ASSERT_EQ(file.records(), 3);
  EXPECT_EQ(file.line(0), 1);
  EXPECT_EQ(file.line(1), 3);
  EXPECT_EQ(file.line(2), 4);
  EXPECT_EQ(file.tokens(), first.stats.tokens);
  // The record file holds what RecordTokenizer gives for each line.
  const Tokenizer t = small_tokenizer();
  const ChatTemplate chat = small_template();
  RecordTokenizer records(t, &chat, {});
  RecordStats ignored;
  std::vector<uint32_t> expected, got;
  ASSERT_FALSE(records.tokenize(R"({"text": "Paris is the capital."})", expected, ignored));
  got.resize(static_cast<size_t>(file.size(1)));
  file.read(1, 0, file.size(1), got.data());
  EXPECT_EQ(got, expected);

  const auto written = fs::last_write_time(first.path);
  const RecordCache second = make(jsonl);
  EXPECT_FALSE(second.created);
  EXPECT_EQ(second.path, first.path);
  EXPECT_EQ(fs::last_write_time(second.path), written);
  EXPECT_EQ(second.stats.to_json(), first.stats.to_json());  // kept in the file's metadata
}

TEST(RecordFile, AnotherFileTemplateTokenizerOrOptionIsAnotherFile) {
  ScratchDir dir;
  const std::string jsonl = dir.file("chat.jsonl");
  write_text(jsonl, kGood + "\n");
  const Tokenizer t = small_tokenizer();
  const ChatTemplate chat = small_template();
  const std::string base = record_cache_path(t, &chat, jsonl, {});
  EXPECT_EQ(record_cache_path(t, &chat, jsonl, {}), base);
  RecordOptions last;
  last.loss_on = LossOn::kLastAssistant;
  RecordOptions dated;
  dated.date = "2024-01-01";
  RecordOptions skipping;
  skipping.skip_bad_records = true;
  RecordOptions kwargs;
  kwargs.template_kwargs = R"({"enable_thinking": false})";
  for (const RecordOptions& o : {last, dated, skipping, kwargs})
    EXPECT_NE(record_cache_path(t, &chat, jsonl, o), base);
  const ChatTemplate other = ChatTemplate::parse(
      "{% for m in messages %}{{ m.content }}{% endfor %}", "other", "<s>", "</s>");
  EXPECT_NE(record_cache_path(t, &other, jsonl, {}), base);
  EXPECT_NE(record_cache_path(t, nullptr, jsonl, {}), base);
  testing::SmallOptions nfc;
  nfc.nfc = true;
  EXPECT_NE(record_cache_path(small_tokenizer(nfc), &chat, jsonl, {}), base);
  write_text(jsonl, kGood + "\n" + kGood + "\n");
  EXPECT_NE(record_cache_path(t, &chat, jsonl, {}), base);
}

TEST(RecordFile, EveryBadRecordIsAnErrorNamingFileLineAndField) {
  ScratchDir dir;
  const std::string jsonl = dir.file("bad.jsonl");
  for (const BadLine& bad : bad_lines()) {
    write_text(jsonl, kGood + "\n\n" + bad.line + "\n" + kGood + "\n");
    const std::string message = message_of<FormatError>([&] { make(jsonl); });
    EXPECT_NE(message.find("data.jsonl " + jsonl + " line 3: "), std::string::npos) << message;
    EXPECT_NE(message.find(bad.says), std::string::npos) << bad.line << "\n" << message;
    EXPECT_NE(message.find("set data.skip_bad_records"), std::string::npos) << message;
  }
  // Nothing was written.
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename(), "bad.jsonl");
}

TEST(RecordFile, SkippingCountsBadRecordsByKind) {
  ScratchDir dir;
  const std::string jsonl = dir.file("bad.jsonl");
  std::string text = kGood + "\n";
  std::map<std::string, int64_t> expected;
  for (const BadLine& bad : bad_lines()) {
    text += bad.line + "\n";
    ++expected[bad.kind];
  }
  text += R"({"messages": [{"role": "user", "content": "no answer"}]})"
          "\n";
  write_text(jsonl, text);
  RecordOptions options;
  options.skip_bad_records = true;
  const RecordCache cache = make(jsonl, options);
  EXPECT_EQ(cache.stats.skipped, expected);
  EXPECT_EQ(cache.stats.skipped_total(), static_cast<int64_t>(bad_lines().size()));
  EXPECT_EQ(cache.stats.records(), 2);
  EXPECT_EQ(cache.stats.no_assistant, 1);
  const formats::RecordFile file(cache.path);
  EXPECT_EQ(file.records(), 2);
  EXPECT_EQ(file.line(1), static_cast<int64_t>(bad_lines().size()) + 2);
  const std::string summary = cache.stats.summary();
  EXPECT_NE(summary.find("2 records (2 conversations)"), std::string::npos) << summary;
  EXPECT_NE(summary.find(std::to_string(bad_lines().size()) +
                         " bad records (3 content not a string, 1 invalid UTF-8"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("1 conversations without an assistant turn"), std::string::npos)
      << summary;
}

TEST(RecordFile, StatsReadBackAndForeignMetadataIsRefused) {
  RecordStats s;
  s.lines = 9;
  s.conversations = 3;
  s.skipped["not JSON"] = 2;
  s.counted = 11;
  EXPECT_EQ(RecordStats::from_json(s.to_json(), "x").to_json(), s.to_json());
  EXPECT_THROW(RecordStats::from_json("{}", "x.records"), FormatError);
}

TEST(RecordFile, ConversationsNeedATemplateOthersDoNot) {
  ScratchDir dir;
  const std::string jsonl = dir.file("mixed.jsonl");
  write_text(jsonl, R"({"text": "a"})"
                    "\n" +
                        kGood + "\n");
  const Tokenizer t = small_tokenizer();
  const std::string message = message_of<FormatError>(
      [&] { ensure_record_cache(t, nullptr, "x has no chat_template", jsonl, {}, "data.jsonl"); });
  EXPECT_NE(message.find("line 2: it is a conversation, but there is no chat template to render "
                         "it with: x has no chat_template; set data.chat_template"),
            std::string::npos)
      << message;
  write_text(jsonl, R"({"text": "a"})"
                    "\n");
  EXPECT_EQ(ensure_record_cache(t, nullptr, "x", jsonl, {}, "data.jsonl").stats.texts, 1);
}

}  // namespace
}  // namespace pstar::text
