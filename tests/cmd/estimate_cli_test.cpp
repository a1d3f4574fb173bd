// `pstar estimate` end to end: its JSON against its own table's claims, bad input, and the
// config check against what `pstar train` accepts.
#include <algorithm>
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
      // The NVMe tier.
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme", "0"},
       2,
       "--nvme: '0' is not a positive size"},
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme", "-2TB"}, 2, "--nvme: '-2TB'"},
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme", "2XB"}, 2, "--nvme: '2XB'"},
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme", "2TB", "--nvme-bw", "fast"},
       2,
       "--nvme-bw: 'fast' is not a positive rate"},
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme", "2TB", "--nvme-bw", "0GB/s"},
       2,
       "--nvme-bw: '0GB/s'"},
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme", "2TB", "--nvme-write-bw",
        "-3GB/s"},
       2,
       "--nvme-write-bw: '-3GB/s'"},
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme-bw", "6GB/s"},
       2,
       "--nvme-bw needs --nvme SIZE"},
      // 146 layers of hidden 6144 keep 759 GiB of optimizer state on NVMe: 700 GB is too small.
      {{"--hardware", "H100-80GB", "--cpu-mem", "128GB", "--nvme", "700GB", "--hidden", "6144",
        "--layers", "146"},
       5,
       "NVMe tier: the optimizer payloads of"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"estimate"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const RunResult r = run_pstar(args, fs::current_path());
    EXPECT_EQ(r.exit_code, c.exit_code) << r;
    EXPECT_TRUE(contains(r.err, c.message)) << "expected '" << c.message << "'\n" << r;
  }
}

TEST(EstimateCliTest, NvmeTierInJsonAndTables) {
  const std::vector<std::string> hw = {"--hardware", "H100-80GB", "--cpu-mem", "128GB"};
  // Without --nvme no NVMe figure appears.
  const json plain = run_json(hw);
  EXPECT_FALSE(plain["memory"].contains("nvme"));
  EXPECT_FALSE(plain["time"].contains("nvme_io_s"));
  EXPECT_FALSE(plain["hardware"].contains("nvme_capacity"));

  std::vector<std::string> args = hw;
  for (const char* a : {"--nvme", "2TB", "--nvme-bw", "7GB/s"}) args.push_back(a);
  const json j = run_json(args);
  EXPECT_GE(j["max_params"].get<int64_t>(), int64_t{60} * 1000 * 1000 * 1000);
  EXPECT_GT(j["max_params"].get<int64_t>(), 3 * plain["max_params"].get<int64_t>());
  EXPECT_EQ(j["hardware"]["nvme_capacity"].get<int64_t>(), int64_t{2000} * 1000 * 1000 * 1000);
  EXPECT_DOUBLE_EQ(j["hardware"]["nvme_read_gbps"].get<double>(), 7);
  EXPECT_DOUBLE_EQ(j["hardware"]["nvme_write_gbps"].get<double>(), 3.5);  // half: DeepNVMe
  const json& n = j["memory"]["nvme"];
  EXPECT_GT(n["used"].get<int64_t>(), 0);
  EXPECT_EQ(n["used"], n["optimizer_chunks"]);
  EXPECT_LE(n["used"].get<int64_t>(), n["limit"].get<int64_t>());
  EXPECT_EQ(n["limit"].get<int64_t>() + n["reserve"].get<int64_t>(), n["capacity"].get<int64_t>());
  EXPECT_EQ(n["chunks_per_rank"], j["chunks"]["optimizer_on_nvme_per_rank"]);
  EXPECT_EQ(n["chunks_per_rank"].get<int64_t>(), n["compute_on_host_per_rank"].get<int64_t>() +
                                                     n["compute_on_gpu_per_rank"].get<int64_t>());
  EXPECT_EQ(n["used"].get<int64_t>(),
            n["chunks_per_rank"].get<int64_t>() * j["chunks"]["chunk_size"].get<int64_t>() * 12);
  for (const char* tier : {"gpu", "host"}) {
    const json& t = j["memory"][tier];
    const int64_t parts = t["param_grad_chunks"].get<int64_t>() +
                          t["optimizer_chunks"].get<int64_t>() + t["activations"].get<int64_t>() +
                          t["working_set"].get<int64_t>() + t["staging"].get<int64_t>() +
                          t["nvme_staging"].get<int64_t>();
    EXPECT_EQ(parts, t["used"].get<int64_t>()) << tier;
    EXPECT_LE(t["used"].get<int64_t>(), t["limit"].get<int64_t>()) << tier;
  }
  EXPECT_GT(j["memory"]["host"]["nvme_staging"].get<int64_t>(), 0);
  const json& t = j["time"];
  EXPECT_EQ(t["nvme_read_bytes"], n["used"]);
  EXPECT_EQ(t["nvme_write_bytes"], n["used"]);
  const double io = t["nvme_io_s"].get<double>(), adam = t["host_adam_s"].get<double>();
  EXPECT_NEAR(io, n["used"].get<double>() * (1 / 7e9 + 1 / 3.5e9), 1e-9 * io);
  EXPECT_NEAR(t["optimizer_s"].get<double>(), std::max(io, adam) + t["nvme_fill_s"].get<double>(),
              1e-9 * io);
  EXPECT_NEAR(t["step_s"].get<double>(),
              t["gpu_compute_s"].get<double>() + t["transfer_s"].get<double>() +
                  t["optimizer_s"].get<double>() + t["communication_exposed_s"].get<double>(),
              1e-9 * io);

  std::vector<std::string> human = {"estimate"};
  human.insert(human.end(), args.begin(), args.end());
  const RunResult r = run_pstar(human, fs::current_path());
  ASSERT_EQ(r.exit_code, 0) << r;
  for (const char* item : {"NVMe: 1.82 TiB per node, 7.0 GB/s read, 3.5 GB/s write",
                           "NVMe per node", "NVMe staging pool (4 chunks", "NVMe: read",
                           "pipeline fill", "host Adam || NVMe I/O", "filesystem headroom"})
    EXPECT_TRUE(contains(r.out, item)) << item << "\n" << r;

  // llama-3.1-8b on one RTX 4090 with 64 GB of host: out of memory without NVMe, fits with it.
  const std::vector<std::string> rtx = {"estimate",     "--model",   "llama-3.1-8b", "--hardware",
                                        "RTX4090-24GB", "--cpu-mem", "64GB"};
  EXPECT_EQ(run_pstar(rtx, fs::current_path()).exit_code, 5);
  std::vector<std::string> rtx_nvme = rtx;
  rtx_nvme.push_back("--nvme");
  rtx_nvme.push_back("1TB");
  const RunResult fits = run_pstar(rtx_nvme, fs::current_path());
  EXPECT_EQ(fits.exit_code, 0) << fits;
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

  // engine.nvme_path is not read yet: --nvme with a config needs hardware flags.
  r = run_pstar({"estimate", "--config", config, "--nvme", "1TB"}, fs::current_path(), cpu_only);
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "--nvme '1TB': with a config, give the hardware too")) << r;
  r = run_pstar({"estimate", "--config", config, "--json", "--hardware", "H100-80GB", "--cpu-mem",
                 "128GB", "--nvme", "1TB"},
                fs::current_path(), cpu_only);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(json::parse(r.out)["memory"]["nvme"]["used"].get<int64_t>(), 0);  // not needed
}

// ---- the Llama family ---------------------------------------------------------------------------

TEST(EstimateCliTest, ModelNamesAPresetOfEitherFamily) {
  json j = run_json({"--model", "llama-3.1-8b", "--hardware", "H100-80GB", "--cpu-mem", "128GB"});
  EXPECT_TRUE(j["fits"].get<bool>()) << j.dump(2);
  const json& m = j["model"];
  EXPECT_EQ(m["family"], "decoder");
  EXPECT_EQ(m["model_type"], "llama");
  EXPECT_EQ(m["params"].get<int64_t>(), 8030261248LL);  // Hugging Face's published count
  EXPECT_EQ(m["kv_heads"], 8);
  EXPECT_EQ(m["head_dim"], 128);
  EXPECT_EQ(m["intermediate"], 14336);
  EXPECT_EQ(m["vocab"], 128256);
  EXPECT_EQ(m["seq_len"], 2048);  // the preset's training length when --seq-len is not given
  EXPECT_EQ(j["workload"]["seq_len"], 2048);
  EXPECT_GT(j["time"]["tokens_per_s"].get<double>(), 0);

  j = run_json({"--model", "llama-3.1-8b", "--seq-len", "4096", "--micro-batch", "1", "--hardware",
                "H100-80GB", "--cpu-mem", "128GB"});
  EXPECT_EQ(j["model"]["seq_len"], 4096);

  j = run_json({"--model", "GPT3_10B", "--hardware", "A100-80GB", "--cpu-mem", "256GB"});
  EXPECT_EQ(j["model"]["family"], "gpt");
  EXPECT_EQ(j["model"]["hidden"], 4096);
  EXPECT_EQ(j["model"]["layers"], 50);

  // 8B on a 24 GB card with 64 GB of host: refused, naming the model and the tier.
  const RunResult r = run_pstar(
      {"estimate", "--model", "llama-3.1-8b", "--hardware", "RTX4090-24GB", "--cpu-mem", "64GB"},
      fs::current_path());
  EXPECT_EQ(r.exit_code, 5) << r;
  EXPECT_TRUE(contains(r.out, "This (does NOT fit) llama-3.1-8b")) << r;
  EXPECT_TRUE(contains(r.err, "llama-3.1-8b: llama hidden 4096")) << r;
  EXPECT_TRUE(contains(r.err, "model data needs")) << r;
}

// Issue 54: today's families on one H100 with 128 GB of host memory. Qwen3-8B fits; Gemma-3-12B
// and Phi-4 (11.8B and 14.7B parameters: 165 and 205 GB of model data at 14 bytes a parameter,
// more than the two memories hold beside the working set) fit with the NVMe tier. Each count is
// the published one, and the chunk plan pads at most 1% of the model data.
TEST(EstimateCliTest, TodaysFamiliesFitOneH100) {
  struct Model {
    const char* name;
    const char* model_type;
    int64_t params;
    bool needs_nvme;
  };
  for (const Model& m : {Model{"qwen3-8b", "qwen3", 8190735360LL, false},
                         Model{"gemma-3-12b", "gemma3_text", 11766034176LL, true},
                         Model{"phi-4", "phi3", 14659507200LL, true}}) {
    SCOPED_TRACE(m.name);
    std::vector<std::string> args = {"--model",   m.name,      "--hardware",
                                     "H100-80GB", "--cpu-mem", "128GB"};
    if (m.needs_nvme) {
      const RunResult r = run_pstar(
          {"estimate", "--model", m.name, "--hardware", "H100-80GB", "--cpu-mem", "128GB"},
          fs::current_path());
      EXPECT_EQ(r.exit_code, 5) << r;
      EXPECT_TRUE(contains(r.err, "model data needs")) << r;
      args.insert(args.end(), {"--nvme", "2TB"});
    }
    const json j = run_json(args);
    EXPECT_TRUE(j["fits"].get<bool>()) << j.dump(2);
    EXPECT_EQ(j["model"]["family"], "decoder");
    EXPECT_EQ(j["model"]["model_type"], m.model_type);
    EXPECT_EQ(j["model"]["params"].get<int64_t>(), m.params);
    const double padding = j["chunks"]["padding_elements"].get<double>();
    EXPECT_LE(padding, 0.01 * static_cast<double>(m.params)) << j["chunks"].dump();
  }
}

TEST(EstimateCliTest, BadModelNamesAreRefusedWithTheKnownOnes) {
  const std::vector<BadInput> cases = {
      {{"--model", "llama-4", "--hardware", "H100-80GB", "--cpu-mem", "128GB"},
       2,
       "--model: unknown model 'llama-4'; known: gpt-tiny"},
      {{"--model", "llama-4", "--hardware", "H100-80GB", "--cpu-mem", "128GB"},
       2,
       "llama-3.1-8b, llama-2-13b, mistral-7b"},
      {{"--model", "llama-3.1-8b", "--hidden", "4096", "--hardware", "H100-80GB", "--cpu-mem",
        "128GB"},
       2,
       "fixes the shape"},
      {{"--family", "llama", "--hidden", "5000", "--hardware", "H100-80GB", "--cpu-mem", "128GB"},
       2,
       "multiple of 1024"},
      {{"--family", "llama", "--hidden", "4096", "--heads", "16", "--hardware", "H100-80GB",
        "--cpu-mem", "128GB"},
       2,
       "head_dim 128"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"estimate"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const RunResult r = run_pstar(args, fs::current_path());
    EXPECT_EQ(r.exit_code, c.exit_code) << r;
    EXPECT_TRUE(contains(r.err, c.message)) << "expected '" << c.message << "'\n" << r;
  }
}

TEST(EstimateCliTest, FamilyLlamaSearchesLlama3LikeShapes) {
  const json j = run_json({"--family", "llama", "--hardware", "A100-80GB", "--gpus-per-node", "8",
                           "--cpu-mem", "1TB", "--seq-len", "2048"});
  const json& m = j["model"];
  EXPECT_EQ(m["family"], "decoder");
  EXPECT_EQ(m["model_type"], "llama");
  EXPECT_EQ(m["head_dim"], 128);
  EXPECT_EQ(m["kv_heads"], 8);
  EXPECT_EQ(m["vocab"], 128256);
  EXPECT_EQ(m["tie_word_embeddings"], false);
  EXPECT_EQ(m["heads"].get<int64_t>() * 128, m["hidden"].get<int64_t>());
  EXPECT_GT(j["max_params"].get<int64_t>(), int64_t{40} * 1000 * 1000 * 1000);
  // The ladder is the Llama-family presets, with their published counts; 8B fits this node, and
  // a preset fits exactly when it is no larger than the largest model found.
  bool saw_70b = false;
  for (const auto& l : j["ladder"]) {
    if (l["name"] == "llama-3.1-8b") {
      EXPECT_TRUE(l["fits"].get<bool>());
    }
    if (l["name"] == "llama-3.1-70b") {
      saw_70b = true;
      EXPECT_EQ(l["params"].get<int64_t>(), 70553706496LL);
    }
    if (l["fits"].get<bool>()) {
      EXPECT_LE(l["params"], j["max_params"]) << l["name"];
    }
  }
  EXPECT_TRUE(saw_70b) << j["ladder"].dump();

  // A fixed width searches its depth.
  const json fixed = run_json(
      {"--family", "llama", "--hidden", "4096", "--hardware", "H100-80GB", "--cpu-mem", "128GB"});
  EXPECT_EQ(fixed["model"]["hidden"], 4096);
  EXPECT_EQ(fixed["model"]["intermediate"], 14336);
  EXPECT_GE(fixed["model"]["layers"].get<int64_t>(), 32);  // the 8B fits there (see above)
}

// A Llama config, named by preset or by a Hugging Face folder's config.json, checked as the GPT
// configs are; CONFIG also works as a positional argument.
TEST(EstimateCliTest, LlamaConfigsAreChecked) {
  pstar::testing::ScratchDir dir;
  pstar::testing::write_text(dir.file("corpus.txt"), pstar::testing::repetitive_corpus());
  const std::string preset = dir.file("preset.json");
  pstar::testing::write_text(preset, R"({"model": {"preset": "llama-tiny", "seq_len": 64},
      "data": {"text": "corpus.txt"}, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
      "default_chunk_size": 65536, "engine": {"device_memory": "16MiB", "host_memory": "4MiB"}})");
  json j = run_json({preset, "--hardware", "H100-80GB", "--cpu-mem", "128GB"});
  EXPECT_EQ(j["model"]["family"], "decoder");
  EXPECT_EQ(j["model"]["kv_heads"], 2);
  EXPECT_EQ(j["model"]["seq_len"], 64);
  EXPECT_TRUE(j["fits"].get<bool>());

  // Llama 3.1 8B's config.json (the weights are not read to estimate).
  const std::string folder = dir.file("Llama-3.1-8B");
  fs::create_directories(folder);
  pstar::testing::write_text(folder + "/config.json", R"({
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
      "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu",
      "tie_word_embeddings": false, "torch_dtype": "bfloat16",
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  pstar::testing::write_text(folder + "/model.safetensors", "");
  const std::string from_folder = dir.file("folder.json");
  pstar::testing::write_text(from_folder,
                             R"({"model": {"init_from": "Llama-3.1-8B", "seq_len": 2048},
      "data": {"text": "corpus.txt"}, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
      "engine": {"activation_checkpointing": true}})");
  j = run_json({"--config", from_folder, "--hardware", "H100-80GB", "--cpu-mem", "128GB"});
  EXPECT_EQ(j["model"]["params"].get<int64_t>(), 8030261248LL);
  EXPECT_TRUE(j["fits"].get<bool>());
  const RunResult r =
      run_pstar({"estimate", from_folder, "--hardware", "RTX4090-24GB", "--cpu-mem", "64GB"},
                fs::current_path());
  EXPECT_EQ(r.exit_code, 5) << r;
  EXPECT_TRUE(contains(r.out, "llama hidden 4096, 32 layers, 32/8 query/key-value heads")) << r;
  EXPECT_TRUE(contains(r.out, "DOES NOT FIT")) << r;
}

}  // namespace
}  // namespace pstar::cmd
