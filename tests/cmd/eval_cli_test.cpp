// The held-out loss end to end: `pstar train` with evaluation on one and two ranks changes nothing
// of training (per-step losses and every rank's checkpoint file, byte for byte), `pstar eval`
// reproduces the logged eval_loss from the checkpoint (and writes it to an event file), and two
// ranks share a text's token cache (Note [token cache on several ranks]).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "event_file_reader.h"
#include "metrics_util.h"
#include "test_util.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::testing::read_text;
using pstar::testing::write_text;

class EvalCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "conf");
    write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
    write_text(dir_.file("conf/held-out.txt"),
               pstar::testing::repetitive_corpus(30) + "Pack my box: 5 dozen jugs!");
  }

  // gpt-tiny in fp32 on the chunk engine with a device budget that makes chunks move every step
  // (as DistTrainTest's), evaluated after every step including the warm-up's.
  static json config(int64_t micro_batch, int64_t steps, bool evaluate, const std::string& save) {
    json c = {
        {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
        {"data", {{"text", "corpus.txt"}}},
        {"train_micro_batch_size_per_gpu", micro_batch},
        {"default_chunk_size", 20000},
        {"bf16", {{"enabled", false}}},
        {"training",
         {{"steps", steps}, {"log_interval", 100}, {"save_dir", save}, {"save_interval", steps}}},
        {"engine",
         {{"mode", "chunked"},
          {"chunk_size_search", false},
          {"device_memory", "3MB"},
          {"host_memory", "1GB"}}},
    };
    if (evaluate) {
      c["data"]["eval"] = {{"text", "held-out.txt"}};
      c["training"]["eval_interval"] = 1;
      c["training"]["eval_batches"] = 3;
    }
    return c;
  }

  std::string write_config(const json& c, const std::string& name) {
    write_text(dir_.file("conf/" + name), c.dump(2));
    return "conf/" + name;
  }

  RunResult pstar(std::vector<std::string> args) {
    args.insert(args.end(), {"--device", "cpu"});
    return run_pstar(args, dir_.path());
  }

  // `pstar eval`'s JSON line (under --nproc, rank 0's, which the launcher prefixes "[rank 0] ").
  static json result_of(const RunResult& r) {
    const size_t brace = r.out.find('{');
    try {
      if (brace != std::string::npos) return json::parse(r.out.substr(brace));
    } catch (const json::exception& e) {
      ADD_FAILURE() << e.what();
    }
    ADD_FAILURE() << "no JSON line on stdout:\n" << r;
    return json{{"eval_loss", NAN}, {"step", -1}, {"windows", -1}};
  }
  static double eval_loss_of(const RunResult& r) { return result_of(r)["eval_loss"].get<double>(); }

  pstar::testing::ScratchDir dir_;
};

// One rank and two: the same losses step by step and the same checkpoint bytes (every rank's file)
// with and without an evaluation after every step; the two ranks log the same reduced eval_loss.
TEST_F(EvalCliTest, EvaluationChangesNothingOfTrainingOnOneAndTwoRanks) {
  constexpr int64_t kSteps = 5;
  for (int64_t ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    const std::string tag = std::to_string(ranks);
    std::map<bool, std::vector<json>> metrics;
    for (bool evaluate : {false, true}) {
      const std::string name = (evaluate ? "with-" : "without-") + tag;
      const std::string cfg =
          write_config(config(4 / ranks, kSteps, evaluate, "ck-" + name), name + ".json");
      const RunResult r = pstar({"train", cfg, "--nproc", tag, "--metrics", name + ".jsonl"});
      ASSERT_EQ(r.exit_code, 0) << r;
      metrics[evaluate] = read_metrics(dir_.file(name + ".jsonl"));
      ASSERT_EQ(metrics[evaluate].size(), static_cast<size_t>(kSteps)) << r;
      if (evaluate) {
        EXPECT_NE(r.err.find("eval_loss "), std::string::npos) << "progress line: " << r;
        EXPECT_NE(r.err.find(", held-out "), std::string::npos) << "summary line: " << r;
      }
    }
    for (int64_t s = 0; s < kSteps; ++s) {
      const json& with = metrics[true][static_cast<size_t>(s)];
      const json& without = metrics[false][static_cast<size_t>(s)];
      EXPECT_EQ(with["loss"].get<double>(), without["loss"].get<double>()) << "step " << s + 1;
      EXPECT_EQ(with["grad_norm"].get<double>(), without["grad_norm"].get<double>());
      EXPECT_EQ(with["moved_h2d_bytes"], without["moved_h2d_bytes"]) << "step " << s + 1;
      ASSERT_TRUE(with.contains("eval_loss")) << with.dump();
      EXPECT_FALSE(without.contains("eval_loss"));
    }
    if (ranks == 2) {
      const auto rank1 = read_metrics(dir_.file("with-2.jsonl.rank1"));
      ASSERT_EQ(rank1.size(), static_cast<size_t>(kSteps));
      for (int64_t s = 0; s < kSteps; ++s)
        EXPECT_EQ(rank1[static_cast<size_t>(s)]["eval_loss"].get<double>(),
                  metrics[true][static_cast<size_t>(s)]["eval_loss"].get<double>());
    }
    for (int64_t rank = 0; rank < ranks; ++rank) {
      const std::string file = "step-00000005/ckpt-" + std::to_string(rank) + ".pt";
      const std::string with = read_text(dir_.file("ck-with-" + tag + "/" + file));
      const std::string without = read_text(dir_.file("ck-without-" + tag + "/" + file));
      EXPECT_FALSE(with.empty()) << file;
      EXPECT_TRUE(with == without) << file << " differs";
    }
    // `pstar eval` on the final checkpoint, with as many ranks: the logged value, bit for bit.
    const double logged = metrics[true].back()["eval_loss"].get<double>();
    const RunResult again = pstar({"eval", "conf/with-" + tag + ".json", "--nproc", tag, "--resume",
                                   "ck-with-" + tag + "/step-00000005", "-q"});
    ASSERT_EQ(again.exit_code, 0) << again;
    EXPECT_EQ(eval_loss_of(again), logged) << again;
    EXPECT_EQ(result_of(again)["step"], kSteps);
    EXPECT_EQ(result_of(again)["windows"], 3 * (4 / ranks));
  }
}

// `pstar eval` at an intermediate checkpoint equals what training logged at that step; on another
// number of ranks the same windows give the same loss up to rounding; the initial model's is
// about ln(256); no held-out data is a config error (exit code 2).
TEST_F(EvalCliTest, EvalOfACheckpointMatchesTheLog) {
  json c = config(2, 6, true, "ck");
  c["training"]["save_interval"] = 3;
  c["training"]["eval_interval"] = 3;
  c["training"]["eval_batches"] = 4;
  const std::string cfg = write_config(c, "train.json");
  const RunResult r = pstar({"train", cfg, "--metrics", "m.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto lines = read_metrics(dir_.file("m.jsonl"));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_FALSE(lines[1].contains("eval_loss"));
  const double at3 = lines[2]["eval_loss"].get<double>();
  const RunResult step3 = pstar({"eval", cfg, "--resume", "ck/step-00000003", "-q"});
  ASSERT_EQ(step3.exit_code, 0) << step3;
  EXPECT_EQ(eval_loss_of(step3), at3);
  const RunResult two =
      pstar({"eval", cfg, "--resume", "ck/step-00000003", "--nproc", "2", "--tensorboard", "tb"});
  ASSERT_EQ(two.exit_code, 0) << two;
  EXPECT_NEAR(eval_loss_of(two), at3, 1e-5 * at3);
  // --tensorboard: rank 0 alone writes the loss, at the checkpoint's step.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir_.file("tb")))
    files.push_back(entry.path().string());
  ASSERT_EQ(files.size(), 1u);
  const auto events = pstar::testing::read_events(files[0]);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].step, 3);
  ASSERT_EQ(events[1].scalars.size(), 1u);
  EXPECT_EQ(events[1].scalars[0].first, "eval/loss");
  EXPECT_EQ(events[1].scalars[0].second, static_cast<float>(eval_loss_of(two)));
  const RunResult initial = pstar({"eval", cfg, "-q"});
  ASSERT_EQ(initial.exit_code, 0) << initial;
  EXPECT_NEAR(eval_loss_of(initial), std::log(256.0), 0.3);
  EXPECT_GT(eval_loss_of(initial), at3 + 0.2);
  const RunResult none = pstar({"eval", write_config(config(2, 6, false, ""), "none.json")});
  EXPECT_EQ(none.exit_code, 2) << none;
  EXPECT_NE(none.err.find("no held-out data to evaluate"), std::string::npos) << none;
}

// Two ranks on data.text with a real tokenizer (GPT-2's, from scripts/fetch-tokenizer-data.sh):
// rank 0 writes the token cache and rank 1 reads it (Note [token cache on several ranks]): one
// cache file, no leftovers, and a held-out fraction of it evaluated.
TEST_F(EvalCliTest, TwoRanksShareOneTokenCache) {
  const char* env = std::getenv("PSTAR_TOKENIZER_DATA");
  const fs::path gpt2 =
      fs::path(env && *env ? env : PSTAR_SOURCE_DIR "/.cache/tokenizers") / "gpt2";
  if (!fs::exists(gpt2 / "vocab.json"))
    GTEST_SKIP() << "no GPT-2 tokenizer at " << gpt2 << ": run scripts/fetch-tokenizer-data.sh";
  const json c = {
      {"model",
       {{"hidden", 16}, {"layers", 1}, {"heads", 2}, {"vocab_size", 50257}, {"seq_len", 16}}},
      {"data", {{"text", "corpus.txt"}, {"tokenizer", gpt2.string()}, {"eval_fraction", 0.1}}},
      {"train_micro_batch_size_per_gpu", 2},
      {"bf16", {{"enabled", false}}},
      {"default_chunk_size", 900000},  // the embedding's chunk and the rest's: one per rank
      {"training", {{"steps", 2}}},
      {"engine", {{"mode", "chunked"}, {"chunk_size_search", false}}},
  };
  const RunResult r =
      pstar({"train", write_config(c, "tok.json"), "--nproc", "2", "--metrics", "tok.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_NE(r.err.find("data.text tokenized into"), std::string::npos) << r;
  int caches = 0, others = 0;
  for (const auto& entry : fs::directory_iterator(dir_.path() / "conf")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("corpus.txt.pstar-", 0) == 0 && name.size() > 7 &&
        name.substr(name.size() - 7) == ".tokens")
      ++caches;
    else if (name.rfind("corpus.txt.", 0) == 0)
      ++others;
  }
  EXPECT_EQ(caches, 1);
  EXPECT_EQ(others, 0) << "a temporary file was left beside the cache";
  const auto lines = read_metrics(dir_.file("tok.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines.back().contains("eval_loss"));
}

}  // namespace
}  // namespace pstar::cmd
