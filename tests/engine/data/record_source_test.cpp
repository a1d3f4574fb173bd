// data.jsonl opened end to end (open_record_sources, open_training_data) through a small tokenizer
// and chat template written here: the records and their split, the errors that name the file and
// the line, and the training data over records beside that over tokens.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/data/batch_sampler.h"
#include "pstar/data/record_sampler.h"
#include "pstar/data/record_source.h"
#include "pstar/data/token_source.h"
#include "pstar/data/training_data.h"
#include "pstar/formats/config.h"
#include "pstar/formats/token_file.h"
#include "test_util.h"
#include "text/record_fixtures.h"

namespace pstar::data {
namespace {

using pstar::testing::message_of;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

std::string conversation(int i) {
  return R"({"messages": [{"role": "user", "content": "Question )" + std::to_string(i) +
         R"("}, {"role": "assistant", "content": "Paris is the capital )" + std::to_string(i) +
         R"("}]})";
}

// A tokenizer folder (tokenizer.json + tokenizer_config.json with the chat template) and a
// JSON Lines file of `n` conversations, as data keys.
config::DataConfig jsonl_data(const ScratchDir& dir, int n, const std::string& extra = "") {
  std::filesystem::create_directories(dir.path() / "tok");
  write_text(dir.file("tok/tokenizer.json"), text::testing::small_tokenizer_json());
  write_text(dir.file("tok/tokenizer_config.json"), text::testing::small_tokenizer_config());
  std::string lines;
  for (int i = 0; i < n; ++i) lines += conversation(i) + "\n";
  write_text(dir.file("chat.jsonl"), lines + extra);
  config::DataConfig data;
  data.jsonl = dir.file("chat.jsonl");
  data.tokenizer = dir.file("tok");
  return data;
}

TEST(RecordSourceTest, OpensTheRecordsAndSplitsOffTheLastOnes) {
  ScratchDir dir;
  config::DataConfig data = jsonl_data(dir, 20);
  RecordSources whole = open_record_sources(data, 400, 64);
  ASSERT_EQ(whole.train->records(), 20);
  EXPECT_EQ(whole.eval, nullptr);
  EXPECT_EQ(whole.train->line(19), 20);
  EXPECT_NE(whole.train->describe().find("data.jsonl " + data.jsonl), std::string::npos);

  data.eval_fraction = 0.25;
  RecordSources split = open_record_sources(data, 400, 64);
  ASSERT_EQ(split.train->records(), 15);
  ASSERT_EQ(split.eval->records(), 5);
  EXPECT_EQ(split.eval->line(0), 16);  // the last records of the file
  EXPECT_NE(split.eval->describe().find("held out by data.eval_fraction: records 15 to 20"),
            std::string::npos);
  EXPECT_EQ(split.train->tokens() + split.eval->tokens(), whole.train->tokens());

  data.eval_fraction.reset();
  write_text(dir.file("held.jsonl"), conversation(100) + "\n");
  data.eval.jsonl = dir.file("held.jsonl");
  RecordSources second = open_record_sources(data, 400, 64);
  EXPECT_EQ(second.train->records(), 20);
  ASSERT_EQ(second.eval->records(), 1);
  EXPECT_NE(second.eval->describe().find("data.eval.jsonl"), std::string::npos);
}

TEST(RecordSourceTest, ErrorsNameTheFileAndTheLine) {
  ScratchDir dir;
  config::DataConfig data = jsonl_data(dir, 3, R"({"text": ")" + std::string(200, 'x') + "\"}\n");
  // Line 4 has 202 tokens (<s>, 200 bytes, </s>).
  data.truncate = false;
  std::string message = message_of<ConfigError>([&] { open_record_sources(data, 400, 64); });
  EXPECT_NE(message.find("data.jsonl " + data.jsonl +
                         " line 4: the record has 202 tokens, more "
                         "than model.seq_len + 1 = 65; set data.truncate to true"),
            std::string::npos)
      << message;
  data.truncate = true;
  EXPECT_NO_THROW(open_record_sources(data, 400, 64));

  message = message_of<ConfigError>([&] { open_record_sources(data, 300, 64); });
  EXPECT_NE(message.find(" line 1: token id 300 (token 0 of the record) is not below "
                         "model.vocab_size 300"),
            std::string::npos)
      << message;

  data.eval_fraction = 0.1;  // floor(0.1 · 4) = 0 records held out
  message = message_of<ConfigError>([&] { open_record_sources(data, 400, 64); });
  EXPECT_NE(message.find("data.eval_fraction 0.1: of data.jsonl"), std::string::npos) << message;
  EXPECT_NE(message.find("raise data.eval_fraction"), std::string::npos) << message;

  write_text(dir.file("chat.jsonl"), "not json\n");
  data.eval_fraction.reset();
  message = message_of<FormatError>([&] { open_record_sources(data, 400, 64); });
  EXPECT_NE(message.find("line 1: not JSON"), std::string::npos) << message;
  data.skip_bad_records = true;
  message = message_of<ConfigError>([&] { open_record_sources(data, 400, 64); });
  EXPECT_NE(message.find("has no record of 2 tokens or more"), std::string::npos) << message;

  config::DataConfig missing = data;
  missing.jsonl = dir.file("absent.jsonl");
  EXPECT_THROW(open_record_sources(missing, 400, 64), IoError);
  // The token-window functions do not read records.
  message = message_of<ConfigError>([&] { open_token_source(data, 400, 64); });
  EXPECT_NE(message.find("holds records"), std::string::npos) << message;
}

TEST(TrainingDataTest, RecordsGiveARecordSamplerAndTokensTheBatchSampler) {
  ScratchDir dir;
  config::TrainConfig c;
  c.data = jsonl_data(dir, 30);
  c.data.eval_fraction = 0.2;
  c.train_micro_batch_size_per_gpu = 2;
  c.gradient_accumulation_steps = 2;
  c.training.eval_batches = 2;
  TrainingData d = open_training_data(c, 400, 64, 1, 2);
  ASSERT_TRUE(d.has_records());
  ASSERT_NE(d.record_sampler, nullptr);
  ASSERT_NE(d.eval, nullptr);
  EXPECT_NE(d.describe().find("24 records"), std::string::npos) << d.describe();
  EXPECT_NE(d.describe().find("random sampling, packed into windows"), std::string::npos);
  EXPECT_NE(d.describe_eval().find("6 records"), std::string::npos) << d.describe_eval();
  const Batch b = d.train->batch(3, 2);
  EXPECT_TRUE(b.packed());
  // The same batch as a sampler made by hand for rank 1 of 2.
  RecordSampler by_hand(*d.records, Sampling::kRandom, true, 2, 64, 2, c.training.seed, 1, 2);
  EXPECT_TRUE(torch::equal(b.targets, by_hand.batch(3, 2).targets));
  EXPECT_EQ(d.global_counted_targets(3), by_hand.global_counted_targets(3));
  EXPECT_GT(d.eval_counted_targets(), 0);

  config::TrainConfig t;
  std::vector<uint32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i % 300);
  t.data.path = dir.file("tokens.bin");
  formats::write_token_file(t.data.path, formats::TokenDType::kU16, tokens);
  t.train_micro_batch_size_per_gpu = 2;
  TrainingData w = open_training_data(t, 400, 16);
  EXPECT_FALSE(w.has_records());
  EXPECT_EQ(w.eval, nullptr);
  const Batch tb = w.train->batch(2, 1);
  EXPECT_FALSE(tb.packed());
  BatchSampler plain(*w.tokens, Sampling::kRandom, 2, 16, 1, t.training.seed);
  EXPECT_TRUE(torch::equal(tb.inputs, plain.batch(2, 1).inputs));
  EXPECT_EQ(w.global_counted_targets(2), 2 * 16);
}

// Gemma 3's ids run past 262,000. A tokenizer shaped like its tokenizer.json (BPE over code points,
// byte fallback, Replace(" " -> "▁"), "\n" an added token) with its ids placed there: they pass
// through the record file, the token file (uint32) and the batch into the embedding unchanged.
TEST(RecordSourceTest, IdsPastTwoToTheSixteenReachTheEmbedding) {
  using Json = nlohmann::json;
  constexpr uint32_t kBase = 262000;
  Json vocab = {{"<unk>", kBase},
                {"a", kBase + 300},
                {"b", kBase + 301},
                {"\xE2\x96\x81", kBase + 302},
                {"ab", kBase + 303}};
  for (unsigned b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = kBase + 1 + b;
  }
  const Json added = Json::array(
      {{{"id", kBase + 400}, {"content", "<start_of_turn>"}, {"special", true}},
       {{"id", kBase + 401}, {"content", "<end_of_turn>"}, {"special", true}},
       {{"id", kBase + 402}, {"content", "\n"}, {"special", false}, {"normalized", false}}});
  const Json tokenizer = {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", Json::array({Json::array({"a", "b"})})},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true}}}};
  const Json config = {
      {"chat_template",
       "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n"
       "{% endfor %}"},
      {"eos_token", "<end_of_turn>"}};
  ScratchDir dir;
  std::filesystem::create_directories(dir.path() / "tok");
  write_text(dir.file("tok/tokenizer.json"), tokenizer.dump());
  write_text(dir.file("tok/tokenizer_config.json"), config.dump());
  write_text(dir.file("chat.jsonl"), R"({"messages": [{"role": "user", "content": "ab ab?"},)"
                                     R"( {"role": "assistant", "content": "ba ab \u00e9"}]})"
                                     "\n");
  constexpr int64_t kVocab = kBase + 403;

  config::TrainConfig c;
  c.data.jsonl = dir.file("chat.jsonl");
  c.data.tokenizer = dir.file("tok");
  c.data.sampling = "sequential";
  const RecordSources sources = open_record_sources(c.data, kVocab, 64);
  std::vector<uint32_t> record(static_cast<size_t>(sources.train->size(0)));
  sources.train->read(0, 0, static_cast<int64_t>(record.size()), record.data());
  std::vector<int64_t> ids;
  for (uint32_t token : record) ids.push_back(formats::record_token_id(token));
  // <start_of_turn>, then "user" in bytes (no entries), "\n", ab ▁ab: "ab" merged, ...
  ASSERT_GT(ids.size(), 20u);
  EXPECT_EQ(ids[0], kBase + 400);
  EXPECT_EQ(ids[1], kBase + 1 + 'u');
  EXPECT_EQ(*std::min_element(ids.begin(), ids.end()), kBase + 1 + '?');
  EXPECT_NE(std::find(ids.begin(), ids.end(), kBase + 303), ids.end());  // "ab"

  // One window holding the whole record: its inputs are the record's ids, and the embedding
  // looks each up.
  const int64_t seq_len = static_cast<int64_t>(ids.size()) - 1;
  TrainingData d = open_training_data(c, kVocab, seq_len);
  const Batch b = d.train->batch(1, 1);
  ASSERT_EQ(b.inputs.size(1), seq_len);
  const std::vector<int64_t> inputs(b.inputs.data_ptr<int64_t>(),
                                    b.inputs.data_ptr<int64_t>() + seq_len);
  EXPECT_EQ(inputs, std::vector<int64_t>(ids.begin(), ids.end() - 1));
  const torch::Tensor weight = torch::arange(kVocab, torch::kFloat64).unsqueeze(1);
  const torch::Tensor looked_up = torch::embedding(weight, b.inputs).squeeze(-1);
  EXPECT_TRUE(torch::equal(looked_up.to(torch::kInt64), b.inputs));

  // The same text as data.text: a token file of uint32 ids beside it.
  config::DataConfig text;
  text.text = dir.file("doc.txt");
  text.tokenizer = dir.file("tok");
  write_text(text.text, "ab ab?\nba ab \u00e9\n");
  const auto source = open_token_source(text, kVocab, 4);
  std::vector<int64_t> tokens(static_cast<size_t>(source->size()));
  source->read(0, source->size(), tokens.data());
  EXPECT_EQ(tokens.front(), kBase + 303);
  EXPECT_EQ(*std::max_element(tokens.begin(), tokens.end()), kBase + 402);
  bool uint32_file = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    uint32_file = uint32_file || entry.path().string().find(".uint32.tokens") != std::string::npos;
  EXPECT_TRUE(uint32_file);
}

}  // namespace
}  // namespace pstar::data
