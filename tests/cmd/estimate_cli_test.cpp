// `pstar estimate` end to end: its JSON against its own table's claims, bad input, and the
// config check against what `pstar train` accepts.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "test_util.h"

namespace pstar::cmd {
namespace {

using nlohmann::json;

json run_json(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"estimate", "--json"};
  all.insert(all.end(), args.begin(), args.end());
  const RunResult r = run_pstar(all, fs::current_path());
  EXPECT_EQ(r.exit_code, 0) << r;
  try {
    return json::parse(r.out);
  } catch (const json::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r;
    return json::object();
  }
}

TEST(EstimateCliTest, JsonHasTheLargestModelAndItsMemory) {
  const json j = run_json({"--hardware", "A100-80GB", "--gpus-per-node", "8", "--cpu-mem", "1TB"});
  ASSERT_TRUE(j.contains("max_params"));
  EXPECT_GE(j["max_params"].get<int64_t>(), int64_t{68} * 1000 * 1000 * 1000);
  const json& m = j["model"];
  const int64_t h = m["hidden"], l = m["layers"], v = 50257;
  // GPT-2 parameter count for the reported shape.
  EXPECT_EQ(j["max_params"].get<int64_t>(), l * (12 * h * h + 13 * h) + v * h + 1024 * h + 2 * h);
  for (const char* tier : {"gpu", "host"}) {
    const json& t = j["memory"][tier];
    const int64_t parts = t["param_grad_chunks"].get<int64_t>() +
                          t["optimizer_chunks"].get<int64_t>() + t["activations"].get<int64_t>() +
                          t["working_set"].get<int64_t>() + t["staging"].get<int64_t>();
    EXPECT_EQ(parts, t["used"].get<int64_t>()) << tier;
    EXPECT_LE(t["used"].get<int64_t>(), t["limit"].get<int64_t>()) << tier;
    EXPECT_EQ(t["limit"].get<int64_t>() + t["reserve"].get<int64_t>(), t["capacity"].get<int64_t>())
        << tier;
  }
  EXPECT_EQ(j["memory"]["gpu"]["capacity"].get<int64_t>(), int64_t{80} << 30);
  EXPECT_GT(j["time"]["tflops_per_gpu"].get<double>(), 0);
}

TEST(EstimateCliTest, FixedWidthSearchesLayersAndCompareIsLabelled) {
  const json j = run_json({"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--hidden", "8192",
                           "--heads", "64", "--compare"});
  EXPECT_EQ(j["model"]["hidden"], 8192);
  EXPECT_EQ(j["model"]["heads"], 64);
  EXPECT_GT(j["model"]["layers"].get<int64_t>(), 0);
  ASSERT_EQ(j["compare"].size(), 2u);
  EXPECT_NE(j["compare"][0]["source"].get<std::string>().find("theirs"), std::string::npos);
}

TEST(EstimateCliTest, HumanReportNamesEveryItem) {
  const RunResult r =
      run_pstar({"estimate", "--hardware", "RTX4090-24GB", "--cpu-mem", "256GB", "--compare"},
                fs::current_path());
  ASSERT_EQ(r.exit_code, 0) << r;
  for (const char* item :
       {"Largest GPT", "param+grad chunks", "master + momentum + variance", "activations",
        "with checkpointing off", "working set", "pinned staging", "padding", "reserve",
        "GPU compute", "host Adam", "TFLOPS per GPU", "DeepSpeed", "micro-batch"})
    EXPECT_TRUE(contains(r.out, item)) << item << "\n" << r;
}

struct BadInput {
  std::vector<std::string> args;
  int exit_code;
  std::string message;
};

TEST(EstimateCliTest, BadInputIsRefusedClearly) {
  const std::vector<BadInput> cases = {
      {{"--gpu-mem", "0", "--cpu-mem", "64GB"}, 2, "--gpu-mem: '0' is not a positive size"},
      {{"--gpu-mem", "-8GB", "--cpu-mem", "64GB"}, 2, "--gpu-mem: '-8GB'"},
      {{"--gpu-mem", "80XB", "--cpu-mem", "64GB"}, 2, "units B, KB"},
      {{"--hardware", "A100", "--cpu-mem", "64GB"}, 2, "unknown GPU 'A100'; known: V100-32GB"},
      {{"--hardware", "A100-80GB"}, 2, "--cpu-mem"},
      {{"--cpu-mem", "64GB"}, 2, "--hardware NAME"},
      {{"--hardware", "A100-80GB", "--cpu-mem", "64GB", "--gpus-per-node", "0"},
       2,
       "--gpus-per-node"},
      {{"--hardware", "A100-80GB", "--cpu-mem", "64GB", "--micro-batch", "-1"}, 2, "--micro-batch"},
      {{"--hardware", "A100-80GB", "--cpu-mem", "64GB", "--chunk-size", "12Q"}, 2, "--chunk-size"},
      {{"--hardware", "A100-80GB", "--cpu-mem", "64GB", "--hidden", "1000", "--heads", "7"},
       2,
       "not divisible"},
      // Impossible: one layer of this width does not fit the device.
      {{"--hardware", "RTX4090-24GB", "--cpu-mem", "64GB", "--hidden", "262144"},
       5,
       "no GPT of hidden 262144 fits"},
      {{"--hardware", "A100-80GB", "--cpu-mem", "64GB", "--hidden", "8192", "--layers", "500"},
       5,
       "does not fit"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"estimate"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const RunResult r = run_pstar(args, fs::current_path());
    EXPECT_EQ(r.exit_code, c.exit_code) << r;
    EXPECT_TRUE(contains(r.err, c.message)) << "expected '" << c.message << "'\n" << r;
  }
}

// A small chunk-engine config in `dir` (c.json, with its corpus) whose bf16.enabled is `bf16`.
std::string write_small_config(const pstar::testing::ScratchDir& dir, const std::string& bf16) {
  pstar::testing::write_text(dir.file("corpus.txt"), pstar::testing::repetitive_corpus());
  const std::string config = dir.file("c.json");
  pstar::testing::write_text(
      config,
      R"({"model": {"hidden": 64, "layers": 4, "heads": 4, "vocab_size": 256, "seq_len": 64},
          "data": {"text": "corpus.txt"}, "train_micro_batch_size_per_gpu": 4,
          "bf16": {"enabled": )" +
          bf16 + R"(}, "default_chunk_size": 65536, "training": {"steps": 2},
          "engine": {"device_memory": "16MiB", "host_memory": "4MiB"}})");
  return config;
}

// bf16.enabled "auto": on given GPUs it is estimated as bf16; against the config's own budgets it
// is decided as `pstar train` decides it on this machine (PSTAR_ONEDNN=0: fp32, Note [bf16 on
// CPUs]).
TEST(EstimateCliTest, ConfigWithBf16AutoIsDecidedBeforeEstimating) {
  pstar::testing::ScratchDir dir;
  const std::string config = write_small_config(dir, R"("auto")");
  auto estimate = [&](const std::vector<std::string>& extra, const std::vector<std::string>& env) {
    std::vector<std::string> args = {"estimate", "--config", config, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_pstar(args, fs::current_path(), env);
  };
  const std::vector<std::string> gpu = {"--hardware", "H100-80GB", "--cpu-mem", "128GB"};
  const RunResult on_gpu = estimate(gpu, {});
  ASSERT_EQ(on_gpu.exit_code, 0) << on_gpu;
  EXPECT_TRUE(contains(on_gpu.err, "estimated as bf16 on GPUs")) << on_gpu;
  std::vector<std::string> as_bf16 = gpu;
  as_bf16.insert(as_bf16.end(), {"--set", "bf16.enabled=true"});
  const RunResult bf16 = estimate(as_bf16, {});
  ASSERT_EQ(bf16.exit_code, 0) << bf16;
  EXPECT_EQ(json::parse(on_gpu.out)["memory"], json::parse(bf16.out)["memory"]);

  // This CPU's probe decides: no GPU may be visible, or a CUDA build would estimate for it.
  const RunResult here = estimate({}, {"PSTAR_ONEDNN=0", "CUDA_VISIBLE_DEVICES="});
  ASSERT_EQ(here.exit_code, 0) << here;
  EXPECT_TRUE(contains(here.err, "precision: fp32 (bf16.enabled \"auto\"")) << here;
  const RunResult fp32 = estimate({"--set", "bf16.enabled=false"}, {});
  ASSERT_EQ(fp32.exit_code, 0) << fp32;
  EXPECT_EQ(json::parse(here.out)["memory"], json::parse(fp32.out)["memory"]);
}

// --config without hardware flags checks the config's own budgets: the same verdict as the
// engine's start-up check in `pstar train`.
TEST(EstimateCliTest, ConfigCheckAgreesWithTrain) {
  pstar::testing::ScratchDir dir;
  const std::string config = write_small_config(dir, "true");
  // The config's budgets are the emulated tier's: in a CUDA build on a GPU machine, `train` would
  // take the GPU ("--device auto") and its arena's rules instead.
  const std::vector<std::string> cpu_only = {"CUDA_VISIBLE_DEVICES="};
  RunResult r = run_pstar({"estimate", "--config", config, "--json"}, fs::current_path(), cpu_only);
  ASSERT_EQ(r.exit_code, 0) << r;
  const json j = json::parse(r.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["margin"]["gpu"].get<int64_t>(), 0);
  r = run_pstar({"train", config, "-q"}, fs::current_path(), cpu_only);
  EXPECT_EQ(r.exit_code, 0) << r;

  // Less host and device memory: both refuse, with the same reason.
  const std::vector<std::string> tight = {"--set", "engine.device_memory=\"2MiB\"", "--set",
                                          "engine.host_memory=\"1MiB\""};
  std::vector<std::string> args = {"estimate", "--config", config};
  args.insert(args.end(), tight.begin(), tight.end());
  r = run_pstar(args, fs::current_path(), cpu_only);
  EXPECT_EQ(r.exit_code, 5) << r;
  EXPECT_TRUE(contains(r.out, "DOES NOT FIT")) << r;
  args = {"train", config, "-q"};
  args.insert(args.end(), tight.begin(), tight.end());
  const RunResult t = run_pstar(args, fs::current_path(), cpu_only);
  EXPECT_EQ(t.exit_code, 5) << t;
  EXPECT_TRUE(contains(t.err, "device tier")) << t;
  EXPECT_TRUE(contains(r.err, "device tier")) << r;
}

}  // namespace
}  // namespace pstar::cmd
