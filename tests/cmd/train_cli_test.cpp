// `pstar train` end to end: runs the built binary as a subprocess and checks its exit codes, its
// messages and the metrics file, as a user or a script would see them.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "metrics_util.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

// Layout: the config and its corpus live in <scratch>/conf/, while pstar runs with <scratch> as
// its working directory and is given the config as "conf/train.json". The file's relative
// "corpus.txt" therefore only resolves if it is taken relative to the config file, and a relative
// --set path only if it is taken relative to the working directory.
class TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "conf");
    write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
    write_config(base_config());
  }

  static json base_config() {
    return {
        {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
        {"data", {{"text", "corpus.txt"}}},
        {"train_micro_batch_size_per_gpu", 4},
        {"training", {{"steps", 3}}},
        {"engine", {{"mode", "torch"}}},
    };
  }

  void write_config(const json& config) {
    write_text(dir_.file("conf/train.json"), config.dump(2));
  }

  // `pstar train conf/train.json --device cpu EXTRA...` in the scratch directory.
  RunResult train(const std::vector<std::string>& extra = {},
                  const std::vector<std::string>& env = {}) {
    std::vector<std::string> args{"train", "conf/train.json", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_pstar(args, dir_.path(), env);
  }

  ScratchDir dir_;
};

// One version, from CMakeLists.txt's project(VERSION) (pstar/base/version.h), then the build's
// parts.
TEST(VersionCliTest, VersionComesFromTheProjectVersion) {
  const RunResult r = run_pstar({"--version"}, fs::current_path());
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), std::string("pstar ") + PSTAR_TEST_PROJECT_VERSION)
      << r;
  EXPECT_TRUE(contains(r.out, "\nLibTorch ")) << r;
  // gpt_bench.sh --nproc reads this line to choose the backend of several GPU ranks; a build
  // without the communicator says why (dist::nccl_missing_reason(), which train's error gives).
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("\nNCCL communicator: (built|not built \\(.+\\))\n")))
      << r;
}

TEST_F(TrainCliTest, RunWritesSummaryAndMetrics) {
  const auto r = train({"--metrics", "metrics.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  // 3 steps of 4 sequences x 32 tokens.
  EXPECT_TRUE(contains(r.err, "[pstar] done: 3 steps, 384 tokens in ")) << r;

  const auto metrics = read_metrics(dir_.file("metrics.jsonl"));
  ASSERT_EQ(metrics.size(), 3u) << read_text(dir_.file("metrics.jsonl"));
  for (size_t i = 0; i < metrics.size(); ++i) {
    const json& m = metrics[i];
    for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"})
      EXPECT_TRUE(m.contains(key)) << "line " << i + 1 << " lacks '" << key << "': " << m.dump();
    EXPECT_EQ(m.value("step", int64_t{-1}), static_cast<int64_t>(i + 1)) << m.dump();
    EXPECT_TRUE(m["loss"].is_number()) << m.dump();
  }
  // The summary repeats the first and last loss (rounded for display).
  std::smatch match;
  static const std::regex kLosses(R"(done: [^\n]*; loss ([-+.0-9eE]+) -> ([-+.0-9eE]+))");
  ASSERT_TRUE(std::regex_search(r.err, match, kLosses)) << r;
  EXPECT_NEAR(std::stod(match[1]), metrics.front()["loss"].get<double>(), 1e-3) << r;
  EXPECT_NEAR(std::stod(match[2]), metrics.back()["loss"].get<double>(), 1e-3) << r;
}

// Note [set-up phases]: the split is logged in one line beside "set-up took", and the metrics file
// starts with one start-up record (no "step" key) whose phases and "other" add up to the total.
TEST_F(TrainCliTest, SetUpSplitIsLoggedAndWrittenAsAStartupRecord) {
  const auto r = train({"--metrics", "metrics.jsonl", "--set", "engine.mode=chunked"});
  ASSERT_EQ(r.exit_code, 0) << r;
  static const std::regex kSetup(R"(\[pstar\] set-up took [0-9.]+ s: [^\n]*\n)");
  EXPECT_TRUE(std::regex_search(r.err, kSetup)) << r;
  const auto all = read_metrics(dir_.file("metrics.jsonl"), /*all=*/true);
  ASSERT_EQ(all.size(), 4u) << read_text(dir_.file("metrics.jsonl"));
  const json& startup = all.front();
  EXPECT_EQ(startup.value("record", ""), "startup") << startup.dump();
  EXPECT_FALSE(startup.contains("step")) << startup.dump();
  EXPECT_FALSE(startup.contains("loss")) << startup.dump();
  double sum = 0;
  for (const char* phase : {"ranks", "plan", "tier", "model", "init", "weights", "chunks", "alloc",
                            "engine", "data", "checkpoint", "resume", "other"}) {
    const std::string key = std::string(phase) + "_s";
    ASSERT_TRUE(startup.contains(key)) << key << ": " << startup.dump();
    EXPECT_GE(startup[key].get<double>(), 0.0) << key;
    sum += startup[key].get<double>();
  }
  EXPECT_NEAR(sum, startup["setup_s"].get<double>(), 1e-6 + 1e-9 * sum) << startup.dump();
  // The chunk engine allocated its payloads and wrote the initial values into them (Note
  // [counter-based init]); nothing came from a weights file.
  EXPECT_GT(startup["alloc_bytes"].get<int64_t>(), 0) << startup.dump();
  EXPECT_GT(startup["init_bytes"].get<int64_t>(), 0) << startup.dump();
  EXPECT_EQ(startup["weights_bytes"].get<int64_t>(), 0) << startup.dump();
  for (size_t i = 1; i < all.size(); ++i) EXPECT_FALSE(all[i].contains("record")) << all[i].dump();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// bf16.enabled "auto" logs its choice with the probe's numbers (Note [bf16 on CPUs]).
// PSTAR_ONEDNN=0 sends bf16 matmuls to LibTorch's fallback GEMM, the one CPUs without AVX-512 use:
// auto must then choose fp32, and explicit bf16 trains but warns, once.
TEST_F(TrainCliTest, Bf16AutoNamesTheChoiceAndWhy) {
  const auto r = train({"--set", "bf16.enabled=auto"});
  ASSERT_EQ(r.exit_code, 0) << r;
  static const std::regex kChoice(
      R"(precision: (bf16|fp32) \(bf16.enabled "auto" on cpu: bf16 matmul ([0-9.]+) GFLOP/s vs fp32 ([0-9.]+) GFLOP/s \(([0-9.]+)x\), accumulation error ([0-9.e+-]+);)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, kChoice)) << r;
  const double speedup = std::stod(m[4]), error = std::stod(m[5]);
  EXPECT_NEAR(speedup, std::stod(m[2]) / std::stod(m[3]), 0.01 + 0.01 * speedup) << r;
  EXPECT_EQ(m[1], speedup >= 1.0 && error <= 1e-2 ? "bf16" : "fp32") << r;
  EXPECT_TRUE(contains(r.err, m[1] == "bf16" ? "precision BFloat16" : "precision fp32")) << r;
}

TEST_F(TrainCliTest, Bf16AutoChoosesFp32WithoutFastBf16Kernels) {
  const auto r = train({"--set", "bf16.enabled=auto"}, {"PSTAR_ONEDNN=0"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "precision: fp32 (bf16.enabled \"auto\" on cpu")) << r;
  EXPECT_TRUE(contains(r.err, "precision fp32")) << r;
  EXPECT_FALSE(contains(r.err, "warning")) << r;

  const auto forced = train({"--set", "bf16.enabled=true"}, {"PSTAR_ONEDNN=0"});
  ASSERT_EQ(forced.exit_code, 0) << forced;
  EXPECT_EQ(count(forced.err, "warning: bf16.enabled is true, but bf16 is slow or inexact on cpu"),
            1u)
      << forced;
  EXPECT_TRUE(contains(forced.err, "precision BFloat16")) << forced;

  const auto bad = train({}, {"PSTAR_ONEDNN=no"});
  EXPECT_EQ(bad.exit_code, 2) << bad;
  EXPECT_TRUE(contains(bad.err, "PSTAR_ONEDNN=no: expected 0")) << bad;
}

TEST_F(TrainCliTest, SetOverridesChangeTheRun) {
  const auto r = train({"--metrics", "metrics.jsonl", "--set", "training.steps=2", "--set",
                        "optimizer.params.lr=0.01", "--set", "training.lr_schedule.type=constant"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "done: 2 steps")) << r;
  const auto metrics = read_metrics(dir_.file("metrics.jsonl"));
  ASSERT_EQ(metrics.size(), 2u) << read_text(dir_.file("metrics.jsonl"));
  for (const json& m : metrics) EXPECT_DOUBLE_EQ(m["lr"].get<double>(), 0.01) << m.dump();
}

TEST_F(TrainCliTest, UnknownKeyInFileIsAConfigErrorWithSuggestion) {
  json config = base_config();
  config["optimizer"] = {{"params", {{"lrr", 0.01}}}};
  write_config(config);
  const auto r = train();
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "train.json")) << r;
  EXPECT_TRUE(contains(r.err, "'optimizer.params.lrr'")) << r;
  EXPECT_TRUE(contains(r.err, "did you mean 'optimizer.params.lr'")) << r;
}

TEST_F(TrainCliTest, WrongTypeInFileIsAConfigErrorNamingThePath) {
  json config = base_config();
  config["training"]["steps"] = "ten";
  write_config(config);
  const auto r = train();
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "training.steps")) << r;
  EXPECT_TRUE(contains(r.err, "\"ten\"")) << r;
  EXPECT_FALSE(contains(r.err, "--set")) << r;
}

TEST_F(TrainCliTest, UnknownKeyFromSetSaysItCameFromSet) {
  const auto r = train({"--set", "optimizer.params.lrr=0.01"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "did you mean 'optimizer.params.lr'")) << r;
  EXPECT_TRUE(contains(r.err, "from --set 'optimizer.params.lrr=0.01'")) << r;
}

TEST_F(TrainCliTest, WrongTypeFromSetSaysItCameFromSet) {
  const auto r = train({"--set", "training.steps=ten"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "training.steps")) << r;
  EXPECT_TRUE(contains(r.err, "from --set 'training.steps=ten'")) << r;
}

TEST_F(TrainCliTest, MissingDataFileIsAnIoError) {
  json config = base_config();
  config["data"]["text"] = "missing.txt";
  write_config(config);
  const auto r = train();
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.err, "I/O error")) << r;
  // Resolved against the config's directory, not the working directory.
  EXPECT_TRUE(contains(r.err, "conf/missing.txt")) << r;
}

TEST_F(TrainCliTest, TokenIdOutsideVocabIsAConfigError) {
  // uint16 little-endian ids, enough for one sequence of 32 + 1, one of them 300.
  std::vector<uint16_t> ids(100, 7);
  ids[50] = 300;
  std::string bytes;
  for (uint16_t id : ids) {
    bytes.push_back(static_cast<char>(id & 0xff));
    bytes.push_back(static_cast<char>(id >> 8));
  }
  write_text(dir_.file("tokens.bin"), bytes);
  // tokens.bin is in the working directory only: a --set path resolves there.
  const auto r = train(
      {"--set", "model.vocab_size=256", "--set", "data.path=tokens.bin", "--set", "data.text="});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "tokens.bin")) << r;
  EXPECT_TRUE(contains(r.err, "token id 300")) << r;
  EXPECT_TRUE(contains(r.err, "model.vocab_size 256")) << r;
}

TEST_F(TrainCliTest, SetMayComeBeforeTheConfigPath) {
  const auto r = run_pstar({"train", "--set", "training.steps=1", "conf/train.json", "--device",
                            "cpu", "--set=training.log_interval=1"},
                           dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "done: 1 steps")) << r;
}

TEST_F(TrainCliTest, DataTextThatIsADirectoryIsAnIoError) {
  const auto r = train({"--set", "data.text=conf"});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.err, "is not a regular file")) << r;
}

TEST_F(TrainCliTest, NonexistentConfigNamesTheFile) {
  const auto r = run_pstar({"train", "no-such-config.json"}, dir_.path());
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.out + r.err, "no-such-config.json")) << r;
}

TEST_F(TrainCliTest, HelpListsTrain) {
  const auto r = run_pstar({"--help"}, dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.out, "train")) << r;
}

TEST_F(TrainCliTest, TrainHelpListsOptions) {
  const auto r = run_pstar({"train", "--help"}, dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r;
  for (const char* option : {"--set", "--metrics", "--device", "--quiet"})
    EXPECT_TRUE(contains(r.out, option)) << option << " missing:\n" << r;
}

TEST_F(TrainCliTest, NoSubcommandFails) {
  const auto r = run_pstar({}, dir_.path());
  EXPECT_NE(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.out + r.err, "subcommand")) << r;
}

TEST_F(TrainCliTest, QuietSuppressesProgressButStillTrains) {
  const auto r = train({"-q", "--metrics", "metrics.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_FALSE(contains(r.err, "done:")) << r;
  EXPECT_FALSE(contains(r.err, "step 1/3")) << r;
  EXPECT_FALSE(contains(r.err, "config:")) << r;
  EXPECT_EQ(read_metrics(dir_.file("metrics.jsonl")).size(), 3u);
}

TEST_F(TrainCliTest, SameConfigGivesTheSameLosses) {
  const auto a = train({"-q", "--metrics", "a.jsonl"});
  const auto b = train({"-q", "--metrics", "b.jsonl"});
  ASSERT_EQ(a.exit_code, 0) << a;
  ASSERT_EQ(b.exit_code, 0) << b;
  const auto ma = read_metrics(dir_.file("a.jsonl"));
  const auto mb = read_metrics(dir_.file("b.jsonl"));
  ASSERT_EQ(ma.size(), 3u);
  ASSERT_EQ(mb.size(), 3u);
  for (size_t i = 0; i < ma.size(); ++i) {
    // Bit-identical, not merely close: same seed, same data order, same kernels.
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ma[i]["grad_norm"].get<double>(), mb[i]["grad_norm"].get<double>())
        << "step " << i + 1;
  }
}

// Note [torch trace]: LibTorch's profiler over chosen steps, as a Chrome trace. Debian's LibTorch
// 1.13 has no Kineto; PyTorch's own LibTorch (the GPU machines') has.
TEST_F(TrainCliTest, TorchTraceWritesAChromeTraceOfTheChosenStep) {
  const std::string path = dir_.file("step2.trace.json");
  const auto r = train({}, {"PSTAR_TORCH_TRACE=" + path + ":2:1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "tracing 1 step(s) from step 2")) << r;
  if (contains(r.err, "built without Kineto")) {
    EXPECT_FALSE(fs::exists(path));
    GTEST_SKIP() << "this LibTorch was built without Kineto: no trace to check (" << r.err << ")";
  }
  ASSERT_TRUE(fs::exists(path)) << r;
  const json trace = json::parse(read_text(path));
  ASSERT_TRUE(trace.contains("traceEvents")) << path;
  bool matmul = false;
  for (const auto& e : trace["traceEvents"])
    matmul = matmul || (e.contains("name") && contains(e["name"].get<std::string>(), "aten::mm"));
  EXPECT_TRUE(matmul) << "no aten::mm operator in " << path;
}

TEST_F(TrainCliTest, TorchTraceRefusesAMalformedValueNamingIt) {
  auto r = train({}, {"PSTAR_TORCH_TRACE=" + dir_.file("t.json") + ":0"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "PSTAR_TORCH_TRACE")) << r;
  EXPECT_TRUE(contains(r.err, "STEP and COUNT start at 1")) << r;
  r = train({}, {"PSTAR_TORCH_TRACE=" + dir_.file("no/such/t.json")});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "does not exist")) << r;
}

}  // namespace

TEST_F(TrainCliTest, ChunkedRunReportsChunkMetricsAndResumesExactly) {
  // A constant rate, so that the shorter run that writes the checkpoint takes the same steps.
  const std::vector<std::string> chunked = {
      "--set", "engine.mode=chunked", "--set", "training.steps=6",
      "--set", "bf16.enabled=true",   "--set", "training.lr_schedule.type=constant"};
  auto args = chunked;
  args.insert(args.end(), {"--metrics", "full.jsonl"});
  auto r = train(args);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "chunk engine: device peak")) << r;
  const auto full = read_metrics(dir_.file("full.jsonl"));
  ASSERT_EQ(full.size(), 6u);
  for (const char* key : {"device_peak_bytes", "host_peak_bytes", "moved_h2d_bytes",
                          "moved_d2h_bytes", "adam_device_chunks", "loss_scale"})
    EXPECT_TRUE(full[0].contains(key)) << key;

  args = chunked;
  args.insert(args.end(), {"--set", "training.steps=3", "--set", "training.save_dir=ck", "--set",
                           "training.save_interval=3"});
  r = train(args);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(fs::exists(dir_.path() / "ck" / "latest")) << r;
  args = chunked;
  args.insert(args.end(), {"--resume", "ck", "--metrics", "resumed.jsonl"});
  r = train(args);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "resumed from")) << r;
  const auto resumed = read_metrics(dir_.file("resumed.jsonl"));
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed[i]["step"], full[i + 3]["step"]);
    EXPECT_EQ(resumed[i]["loss"], full[i + 3]["loss"]) << "step " << i + 4;
  }
  // A resume directory with nothing in it is an I/O error naming what was looked for.
  fs::create_directories(dir_.path() / "empty");
  r = train({"--resume", "empty"});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.err, "latest")) << r;
}

}  // namespace pstar::cmd
