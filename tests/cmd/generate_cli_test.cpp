// `pstar generate` end to end: a checkpoint of two ranks gives the completions its merged folder
// gives (the checkpoint read as merge-ckpt reads it), a byte-level GPT run generates without a
// tokenizer, and bad input is one clear error naming the value or the file. The numbers themselves
// are tests/engine/generate's (against the float64 reference).
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

// A GPT trained on bytes (data.text without a tokenizer) generates bytes back without one.
TEST(GenerateCliBytes, AByteLevelRunNeedsNoTokenizer) {
  ScratchDir dir;
  write_text(dir.file("corpus.txt"), pstar::testing::repetitive_corpus(20));
  const json c = {
      {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
      {"data", {{"text", "corpus.txt"}}},
      {"train_micro_batch_size_per_gpu", 2},
      {"training", {{"steps", 1}, {"save_dir", "ck"}, {"save_interval", 1}}},
  };
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
