// `pstar generate` end to end: a checkpoint of two ranks gives the completions its merged folder
// gives (the checkpoint read as merge-ckpt reads it), a byte-level GPT run generates without a
// tokenizer, and bad input is one clear error naming the value or the file. The numbers themselves
// are tests/engine/generate's (against the float64 reference).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "engine/family_folders.h"
#include "test_util.h"

namespace pstar::cmd {
namespace {

using nlohmann::json;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// A byte-level tokenizer of the 95 printable ASCII characters, ids 0 to 94 (space is 0): small
// enough for the tiny reference models' vocabulary of 96. GPT-2's alphabet writes a space as "Ġ".
std::string ascii_tokenizer() {
  json vocab = json::object();
  vocab["\xC4\xA0"] = 0;
  for (int c = 33; c < 127; ++c) vocab[std::string(1, static_cast<char>(c))] = c - 32;
  return json{
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}}}}
      .dump();
}

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = pstar::testing::family_folder("llama");
    if (folder_ == nullptr) GTEST_SKIP() << "no Python with torch (Debian: python3-torch)";
    write_text(dir_.file("tokenizer.json"), ascii_tokenizer());
    // Two ranks, two steps from the reference's tiny Llama on its tokens: ck/step-00000002.
    const json c = {
        {"model", {{"init_from", folder_->dir}, {"seq_len", folder_->seq}}},
        {"data", {{"path", folder_->tokens}, {"sampling", "sequential"}}},
        {"train_micro_batch_size_per_gpu", 2},
        {"default_chunk_size", 4096},
        // A large step, so that two of them change what the model says.
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.05}}}}},
        {"training", {{"steps", 2}, {"save_dir", "ck"}, {"save_interval", 2}}},
    };
    write_text(dir_.file("run.json"), c.dump());
    const auto r = train_on_cpu("run.json", {"--nproc", "2"}, dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r;
  }

  RunResult generate(std::vector<std::string> args) {
    args.insert(args.begin(), "generate");
    return run_pstar(args, dir_.path());
  }

  const pstar::testing::FamilyFolder* folder_ = nullptr;
  ScratchDir dir_;
};

TEST_F(GenerateCli, ACheckpointOfTwoRanksGeneratesAsItsMergedFolder) {
  const std::vector<std::string> asked = {
      "--tokenizer", "tokenizer.json",   "--prompt", "Hello, world", "--prompt",
      "ab",          "--max-new-tokens", "6"};
  auto from_checkpoint = asked;
  from_checkpoint.insert(from_checkpoint.begin(), "ck");  // the save_dir: its newest checkpoint
  from_checkpoint.insert(from_checkpoint.end(), {"-o", "a.jsonl"});
  const auto a = generate(from_checkpoint);
  ASSERT_EQ(a.exit_code, 0) << a;
  const auto m =
      run_pstar({"merge-ckpt", "--dir", "ck/step-00000002", "-o", "merged"}, dir_.path());
  ASSERT_EQ(m.exit_code, 0) << m;
  auto from_folder = asked;
  from_folder.insert(from_folder.begin(), "merged");
  from_folder.insert(from_folder.end(), {"-o", "b.jsonl"});
  const auto b = generate(from_folder);
  ASSERT_EQ(b.exit_code, 0) << b;
  const auto lines_a = read_lines(dir_.file("a.jsonl")), lines_b = read_lines(dir_.file("b.jsonl"));
  ASSERT_EQ(lines_a.size(), 2U);
  ASSERT_EQ(lines_b.size(), 2U);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(lines_a[i]["completion_ids"], lines_b[i]["completion_ids"]) << i;
    EXPECT_EQ(lines_a[i]["completion_ids"].size(), 6U);
    EXPECT_EQ(lines_a[i]["stop_reason"], "max_new_tokens");
    EXPECT_GT(lines_a[i]["tokens_per_s"].get<double>(), 0);
  }
  EXPECT_EQ(lines_a[0]["prompt"], "Hello, world");
  EXPECT_EQ(lines_a[0]["prompt_ids"].size(), 12U);
  // The original folder's own weights give other completions: the checkpoint's were read.
  auto from_original = asked;
  from_original.insert(from_original.begin(), folder_->dir);
  from_original.insert(from_original.end(), {"-o", "c.jsonl"});
  ASSERT_EQ(generate(from_original).exit_code, 0);
  const auto lines_c = read_lines(dir_.file("c.jsonl"));
  EXPECT_TRUE(lines_c[0]["completion_ids"] != lines_a[0]["completion_ids"] ||
              lines_c[1]["completion_ids"] != lines_a[1]["completion_ids"]);
  // One prompt without -o streams its text to stdout.
  const auto streamed = generate({"ck", "--tokenizer", "tokenizer.json", "--prompt", "Hello, world",
                                  "--max-new-tokens", "6", "-q"});
  ASSERT_EQ(streamed.exit_code, 0) << streamed;
  EXPECT_EQ(streamed.out, lines_a[0]["completion"].get<std::string>() + "\n");
}

TEST_F(GenerateCli, BadInputIsOneErrorNamingTheValueOrTheFile) {
  auto fails = [&](const std::vector<std::string>& args, const std::string& says) {
    const auto r = generate(args);
    EXPECT_NE(r.exit_code, 0) << r;
    EXPECT_TRUE(contains(r.err, says)) << "expected \"" << says << "\" in\n" << r;
  };
  const std::vector<std::string> tok = {"--tokenizer", "tokenizer.json"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), tok.begin(), tok.end());
    args.insert(args.begin(), "ck");
    return args;
  };
  fails(with({"--prompt", "Hello, world", "--max-length", "8"}),
        "--prompt 1 is 12 tokens long, which leaves no room in the context of 8 positions");
  fails(with({"--prompt", "a", "--temperature", "-1"}), "--temperature -1: expected 0");
  fails(with({"--prompt", "a", "--top-p", "0"}), "--top-p 0: expected a probability in (0, 1]");
  fails(with({"--prompt", "a", "--top-p", "1.5"}), "--top-p 1.5");
  fails(with({}), "no prompts: give --prompt TEXT");
  fails(with({"--prompt", "a", "--chat"}),
        "--prompt 1 is a conversation, which needs the model's chat template");
  fails({"ck", "--prompt", "a"}, "no tokenizer for ck: --tokenizer is not given; ");
  fails({"ck", "--prompt", "a"},
        "config.json's data.tokenizer is empty; " + folder_->dir + " has no tokenizer.json");
  fails({"nowhere", "--prompt", "a"}, "MODEL nowhere: not a directory");
  // A checkpoint with a rank's file missing.
  std::filesystem::copy(dir_.path() / "ck/step-00000002", dir_.path() / "broken");
  std::filesystem::remove(dir_.path() / "broken/ckpt-1.pt");
  const std::vector<std::string> broken = {"broken", "--tokenizer", "tokenizer.json", "--prompt",
                                           "a"};
  fails(broken, "ckpt-1.pt");
}

// A gpt-tiny run on bytes (data.text without a tokenizer) of a corpus written into `dir`, with
// `training`.
json byte_gpt_run(const ScratchDir& dir, const json& training) {
  write_text(dir.file("corpus.txt"), pstar::testing::repetitive_corpus(20));
  return {
      {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
      {"data", {{"text", "corpus.txt"}}},
      {"train_micro_batch_size_per_gpu", 2},
      {"training", training},
  };
}

// Stops: generation_config.json's eos_token_id list where the folder has one (Gemma 3's is
// [1, 106]), else the tokenizer's end of text (tokenizer_config.json's eos_token).
TEST_F(GenerateCli, StopsAtGenerationConfigsListElseTheTokenizersEndOfText) {
  std::filesystem::copy(folder_->dir, dir_.path() / "folder");
  const std::vector<std::string> asked = {"folder",           "--prompt", "Hello, world",
                                          "--max-new-tokens", "8",        "-o"};
  auto run = [&](const std::string& out, const std::vector<std::string>& more = {}) {
    auto args = asked;
    args.push_back(out);
    args.insert(args.end(), more.begin(), more.end());
    if (more.empty()) args.insert(args.end(), {"--tokenizer", "tokenizer.json"});
    const auto r = generate(args);
    EXPECT_EQ(r.exit_code, 0) << r;
    const auto lines = read_lines(dir_.file(out));
    EXPECT_EQ(lines.size(), 1U);
    return lines.empty() ? json() : lines[0];
  };
  const json free = run("free.jsonl");
  ASSERT_EQ(free["stop_reason"], "max_new_tokens") << free;
  const auto ids = free["completion_ids"].get<std::vector<int64_t>>();
  ASSERT_EQ(ids.size(), 8U);
  // The first token after the first that the completion has not drawn before, and an id it never
  // draws before it (the list's other entry).
  size_t at = 1;
  while (at < ids.size() && std::count(ids.begin(), ids.begin() + at, ids[at]) > 0) ++at;
  ASSERT_LT(at, ids.size()) << "a completion of one repeated token";
  int64_t other = 95;
  while (std::count(ids.begin(), ids.begin() + at + 1, other) > 0) --other;
  const std::vector<int64_t> before(ids.begin(), ids.begin() + at);
  write_text(dir_.file("folder/generation_config.json"),
             json{{"bos_token_id", 1}, {"eos_token_id", {other, ids[at]}}}.dump());
  const json listed = run("listed.jsonl");
  EXPECT_EQ(listed["stop_reason"], "stop_token") << listed;
  EXPECT_EQ(listed["stop_token"], ids[at]);
  EXPECT_EQ(listed["completion_ids"].get<std::vector<int64_t>>(), before);
  // Without the file: the tokenizer's end of text.
  std::filesystem::remove(dir_.path() / "folder/generation_config.json");
  std::filesystem::create_directory(dir_.path() / "tok");
  std::filesystem::copy(dir_.path() / "tokenizer.json", dir_.path() / "tok/tokenizer.json");
  const std::string eos =
      ids[at] == 0 ? "\xC4\xA0" : std::string(1, static_cast<char>(ids[at] + 32));
  write_text(dir_.file("tok/tokenizer_config.json"), json{{"eos_token", eos}}.dump());
  const json ended = run("ended.jsonl", {"--tokenizer", "tok"});
  EXPECT_EQ(ended["stop_reason"], "stop_token") << ended;
  EXPECT_EQ(ended["completion_ids"].get<std::vector<int64_t>>(), before);
  // A value that is not a token id is an error naming the file.
  write_text(dir_.file("folder/generation_config.json"), R"({"eos_token_id": "</s>"})");
  const auto bad = generate({"folder", "--tokenizer", "tokenizer.json", "--prompt", "a"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(contains(bad.err, "generation_config.json: eos_token_id holds \"</s>\"")) << bad;
}

// training.eval_samples on two ranks of the chunk engine (chunks fetched by collectives in every
// forward): both ranks run the same forwards, and the evaluated steps' lines of the metrics file
// carry each prompt's completion.
TEST(GenerateCliSamples, TwoRanksWriteTheSamplesOfEachEvaluation) {
  ScratchDir dir;
  json c = byte_gpt_run(dir, {{"steps", 3},
                              {"eval_interval", 2},
                              {"eval_samples", {"The ", "A longer prompt"}},
                              {"eval_sample_tokens", 5}});
  c["default_chunk_size"] = 20000;
  c["bf16"] = {{"enabled", false}};
  c["engine"] = {{"mode", "chunked"},
                 {"chunk_size_search", false},
                 {"device_memory", "3MB"},
                 {"host_memory", "1GB"}};
  write_text(dir.file("run.json"), c.dump());
  const auto r = train_on_cpu("run.json", {"--nproc", "2", "--metrics", "m.jsonl"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<json> steps;
  for (const json& line : read_lines(dir.file("m.jsonl")))
    if (!line.contains("record")) steps.push_back(line);
  ASSERT_EQ(steps.size(), 3U);
  for (const json& line : steps) {
    const int64_t step = line["step"].get<int64_t>();
    ASSERT_EQ(line.contains("eval_samples"), step != 1) << line;
    if (step == 1) continue;
    ASSERT_EQ(line["eval_samples"].size(), 2U) << line;
    EXPECT_EQ(line["eval_samples"][0]["prompt"], "The ");
    EXPECT_EQ(line["eval_samples"][1]["prompt"], "A longer prompt");
    for (const json& s : line["eval_samples"])
      EXPECT_FALSE(s["completion"].get<std::string>().empty()) << line;
  }
}

// A GPT trained on bytes (data.text without a tokenizer) generates bytes back without one.
TEST(GenerateCliBytes, AByteLevelRunNeedsNoTokenizer) {
  ScratchDir dir;
  const json c = byte_gpt_run(dir, {{"steps", 1}, {"save_dir", "ck"}, {"save_interval", 1}});
  write_text(dir.file("run.json"), c.dump());
  ASSERT_EQ(train_on_cpu("run.json", {}, dir.path()).exit_code, 0);
  const auto r = run_pstar({"generate", "ck", "--prompt", "The ", "--max-new-tokens", "5", "-o",
                            "out.jsonl", "--temperature", "1", "--seed", "4"},
                           dir.path());
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto lines = read_lines(dir.file("out.jsonl"));
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0]["prompt_ids"], json({'T', 'h', 'e', ' '}));
  EXPECT_EQ(lines[0]["completion_ids"].size(), 5U);
  // The prompt and new tokens fill 9 of gpt-tiny's 32 positions; a longer prompt does not fit.
  const auto too_long = run_pstar({"generate", "ck", "--prompt", std::string(40, 'a')}, dir.path());
  EXPECT_NE(too_long.exit_code, 0);
  EXPECT_TRUE(contains(too_long.err, "--prompt 1 is 40 tokens long")) << too_long;
}

}  // namespace
}  // namespace pstar::cmd
