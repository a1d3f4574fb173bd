// The config keys of JSON Lines records (data.jsonl and the keys only it uses): defaults, values,
// the round trip through to_json_text, and every error naming its keys.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"

namespace pstar::config {
namespace {

TrainConfig parse(const std::string& json, const std::vector<std::string>& overrides = {}) {
  return parse_train_config(json, "config.json", "/cfg", overrides);
}

std::string config_error(const std::string& json, const std::vector<std::string>& overrides = {}) {
  try {
    parse(json, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError for " << json;
  return "";
}

void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "expected \"" << part << "\" in the message: " << message;
  }
}

// data.jsonl with its tokenizer, plus `rest` inside data.
std::string records(const std::string& rest = "") {
  return R"({"data": {"jsonl": "chat.jsonl", "tokenizer": "tok")" +
         (rest.empty() ? "" : ", " + rest) + "}}";
}

TEST(ConfigRecords, DefaultsAndPaths) {
  const TrainConfig c = parse(records());
  EXPECT_EQ(c.data.jsonl, "/cfg/chat.jsonl");
  EXPECT_EQ(c.data.tokenizer, "/cfg/tok");
  EXPECT_EQ(c.data.chat_template, "");
  EXPECT_EQ(c.data.chat_date, "");
  EXPECT_EQ(c.data.chat_template_kwargs, "");
  EXPECT_EQ(c.data.loss_on, LossOn::kAssistant);
  EXPECT_TRUE(c.data.packing);
  EXPECT_TRUE(c.data.truncate);
  EXPECT_FALSE(c.data.skip_bad_records);
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.data.text, "");
  EXPECT_FALSE(c.data.has_eval());
}

TEST(ConfigRecords, EveryKeyAndTheRoundTrip) {
  const TrainConfig c = parse(records(
      R"("chat_template": "other/tokenizer_config.json", "chat_date": "2024-02-29",
         "chat_template_kwargs": {"enable_thinking": false, "style": ["a", 1]},
         "loss_on": "last_assistant", "packing": false, "truncate": false,
         "skip_bad_records": true, "sampling": "sequential", "eval": {"jsonl": "held.jsonl"})"));
  EXPECT_EQ(c.data.chat_template, "/cfg/other/tokenizer_config.json");
  EXPECT_EQ(c.data.chat_date, "2024-02-29");
  EXPECT_EQ(c.data.chat_template_kwargs, R"({"enable_thinking":false,"style":["a",1]})");
  EXPECT_EQ(c.data.loss_on, LossOn::kLastAssistant);
  EXPECT_FALSE(c.data.packing);
  EXPECT_FALSE(c.data.truncate);
  EXPECT_TRUE(c.data.skip_bad_records);
  EXPECT_EQ(c.data.eval.jsonl, "/cfg/held.jsonl");
  EXPECT_TRUE(c.data.has_eval());
  EXPECT_EQ(parse(records(R"("loss_on": "all")")).data.loss_on, LossOn::kAll);

  const TrainConfig back = parse_train_config(to_json_text(c), "resolved.json", "/elsewhere");
  EXPECT_EQ(back.data.jsonl, c.data.jsonl);
  EXPECT_EQ(back.data.tokenizer, c.data.tokenizer);
  EXPECT_EQ(back.data.chat_template, c.data.chat_template);
  EXPECT_EQ(back.data.chat_date, c.data.chat_date);
  EXPECT_EQ(back.data.chat_template_kwargs, c.data.chat_template_kwargs);
  EXPECT_EQ(back.data.loss_on, c.data.loss_on);
  EXPECT_EQ(back.data.packing, c.data.packing);
  EXPECT_EQ(back.data.truncate, c.data.truncate);
  EXPECT_EQ(back.data.skip_bad_records, c.data.skip_bad_records);
  EXPECT_EQ(back.data.eval.jsonl, c.data.eval.jsonl);
  EXPECT_NE(to_json_text(c).find(R"("loss_on": "last_assistant")"), std::string::npos);

  // --set reaches them; relative paths from --set resolve against the working directory.
  const TrainConfig s = parse(records(), {"data.loss_on=all", "data.packing=false",
                                          "data.chat_template_kwargs.enable_thinking=false"});
  EXPECT_EQ(s.data.loss_on, LossOn::kAll);
  EXPECT_FALSE(s.data.packing);
  EXPECT_EQ(s.data.chat_template_kwargs, R"({"enable_thinking":false})");
  // An empty object or null is none.
  EXPECT_EQ(parse(records(R"("chat_template_kwargs": {})")).data.chat_template_kwargs, "");
  EXPECT_EQ(parse(records(R"("chat_template_kwargs": null)")).data.chat_template_kwargs, "");
}

TEST(ConfigRecords, ExactlyOneSource) {
  expect_contains(config_error(R"({"data": {"path": "a.bin", "jsonl": "a.jsonl"}})"),
                  {"config.json: data.path and data.jsonl are both set; set exactly one of them",
                   "data.jsonl for JSON Lines records"});
  expect_contains(
      config_error(R"({"data": {"path": "a.bin", "text": "a.txt", "jsonl": "a.jsonl"}})"),
      {"data.path, data.text and data.jsonl are all set; set exactly one"});
  expect_contains(config_error(R"({"data": {"jsonl": "a.jsonl"}})"),
                  {"data.jsonl (a.jsonl) needs data.tokenizer", "the model's own tokenizer"});
  expect_contains(config_error(R"({"data": {"path": "a.bin", "tokenizer": "t"}})"),
                  {"data.tokenizer is set without data.text or data.jsonl"});
  // The --set that caused it is named.
  expect_contains(config_error(records(), {"data.text=a.txt"}),
                  {"data.text and data.jsonl are both set", "(from --set 'data.text=a.txt')"});
}

TEST(ConfigRecords, RecordKeysNeedRecords) {
  for (const char* rest :
       {R"("chat_template": "t.json")", R"("chat_date": "2024-01-01")", R"("loss_on": "all")",
        R"("packing": false)", R"("truncate": false)", R"("skip_bad_records": true)",
        R"("chat_template_kwargs": {"enable_thinking": false})"}) {
    const std::string json = std::string(R"({"data": {"text": "a.txt", )") + rest + "}}";
    const std::string key = std::string(rest).substr(1, std::string(rest).find('"', 1) - 1);
    expect_contains(config_error(json), {"data." + key + " is set but data.jsonl is not"});
  }
  // Their defaults, as to_json_text writes them, read back for any source.
  EXPECT_NO_THROW(parse(
      R"({"data": {"text": "a.txt", "loss_on": "assistant", "packing": true, "chat_date": "",
                   "chat_template_kwargs": {}}})"));
}

TEST(ConfigRecords, ValuesAreChecked) {
  expect_contains(config_error(records(R"("loss_on": "assistants")")),
                  {R"(data.loss_on: expected one of "assistant", "last_assistant", "all")",
                   R"(did you mean "assistant"?)"});
  expect_contains(config_error(records(R"("packing": "yes")")),
                  {"data.packing: expected true or false, found string \"yes\""});
  for (const char* bad : {"2024-02-30", "2023-02-29", "24-01-01", "2024/01/01", "2024-13-01",
                          "2024-00-10", "today"}) {
    expect_contains(config_error(records(std::string(R"("chat_date": ")") + bad + "\"")),
                    {"data.chat_date: expected \"\" or a date written YYYY-MM-DD",
                     std::string("found \"") + bad + "\""});
  }
  EXPECT_EQ(parse(records(R"("chat_date": "2000-02-29")")).data.chat_date, "2000-02-29");
  expect_contains(config_error(records(R"("chat_template_kwargs": "enable_thinking=false")")),
                  {"data.chat_template_kwargs: expected a JSON object (or null), found string"});
  expect_contains(config_error(records(R"("chat_template_kwargs": {"messages": []})")),
                  {"data.chat_template_kwargs.messages: a variable pstar sets itself"});
  expect_contains(config_error(records(R"("jsonll": "x")")), {"did you mean 'data.jsonl'?"});
}

TEST(ConfigRecords, HeldOutRecords) {
  TrainConfig c = parse(records(R"("eval_fraction": 0.1)"));
  EXPECT_DOUBLE_EQ(*c.data.eval_fraction, 0.1);
  expect_contains(config_error(records(R"("eval": {"path": "e.bin"})")),
                  {"data.eval.path (e.bin) holds token windows, but data.jsonl trains on "
                   "records",
                   "data.eval.jsonl", "data.eval_fraction"});
  expect_contains(config_error(records(R"("eval": {"text": "e.txt"})")),
                  {"data.eval.text (e.txt) needs training text in data.text",
                   "held-out records in data.eval.jsonl"});
  expect_contains(config_error(R"({"data": {"path": "a.bin", "eval": {"jsonl": "e.jsonl"}}})"),
                  {"data.eval.jsonl (e.jsonl) needs training records in data.jsonl"});
  expect_contains(config_error(records(R"("eval": {"jsonl": "e.jsonl", "text": "e.txt"})")),
                  {"data.eval.text and data.eval.jsonl are both set; set exactly one"});
  expect_contains(config_error(records(R"("eval": {"jsonl": "e.jsonl"}, "eval_fraction": 0.1)")),
                  {"data.eval and data.eval_fraction (0.1) are both set"});
}

}  // namespace
}  // namespace pstar::config
