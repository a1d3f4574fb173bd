// `pstar merge-ckpt` end to end: checkpoints written by `pstar train --nproc 2` (or, for the
// memory test, by this test through the engine's checkpoint writer) merged into one safetensors
// or .pt file, or resharded, by the pstar binary run as a subprocess. The test links the engine
// to read the checkpoint files itself.
#include <sys/resource.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "metrics_util.h"
#include "pstar/base/version.h"
#include "pstar/checkpoint/store.h"
#include "pstar/formats/config.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/gpt.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/llama_shape.h"
#include "pstar/plan/memory_plan.h"
#include "test_util.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::testing::python_with_torch;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

bool is_parameter_name(const checkpoint::TensorMap& tensors, const std::string& name) {
  if (name.rfind("__pstar__.", 0) == 0) return false;
  for (const std::string suffix : {".exp_avg", ".exp_avg_sq"}) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        tensors.count(name.substr(0, name.size() - suffix.size())))
      return false;
  }
  return true;
}

// Every rank's fp32 master parameters, by name.
std::map<std::string, at::Tensor> shard_parameters(const fs::path& step_dir, int64_t ranks) {
  std::map<std::string, at::Tensor> params;
  for (int64_t r = 0; r < ranks; ++r) {
    const checkpoint::TensorMap tensors =
        checkpoint::read_checkpoint_file(checkpoint::checkpoint_file(step_dir, r));
    for (const auto& [name, t] : tensors) {
      if (!is_parameter_name(tensors, name)) continue;
      EXPECT_TRUE(params.emplace(name, t).second) << name << " is in two ranks' files";
    }
  }
  return params;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

at::Tensor safetensors_tensor(const formats::SafetensorsReader& reader,
                              const formats::TensorInfo& info) {
  const auto type = info.dtype == formats::DType::kF32    ? torch::kFloat32
                    : info.dtype == formats::DType::kBF16 ? torch::kBFloat16
                                                          : torch::kFloat16;
  at::Tensor t = torch::empty(info.shape, torch::dtype(type));
  std::memcpy(t.data_ptr(), reader.data(info), info.size_bytes);
  return t;
}

// Runs pstar and reports its own peak resident memory (wait4's rusage of that one child).
struct Measured {
  RunResult result;
  int64_t max_rss_bytes = 0;
};
Measured run_measured(const std::vector<std::string>& args, const fs::path& cwd) {
  Measured m;
  Spawned child = spawn_pstar(args, cwd);
  int status = 0;
  rusage usage{};
  pid_t done;
  do {
    done = wait4(child.pid, &status, 0, &usage);
  } while (done < 0 && errno == EINTR);
  EXPECT_EQ(done, child.pid) << std::strerror(errno);
  child.pid = -1;
  m.result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.result.out = read_all(child.out.get());
  m.result.err = read_all(child.err.get());
  m.max_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
  return m;
}

class MergeCkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "conf");
    fs::create_directories(dir_.path() / "out");
    write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
  }

  // gpt-tiny in fp32 on the chunk engine, 7 chunks of 20000 elements (as in train_dist_test).
  static json config(int64_t steps, int64_t save_interval, const std::string& save_dir) {
    return {
        {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
        {"data", {{"text", "corpus.txt"}}},
        {"train_micro_batch_size_per_gpu", 2},
        {"default_chunk_size", 20000},
        {"bf16", {{"enabled", false}}},
        {"training",
         {{"steps", steps},
          {"log_interval", 1},
          {"save_dir", save_dir},
          {"save_interval", save_interval}}},
        {"engine",
         {{"mode", "chunked"},
          {"chunk_size_search", false},
          {"device_memory", "3MB"},
          {"host_memory", "1GB"}}},
    };
  }

  std::string write_config(const json& c, const std::string& name) {
    write_text(dir_.file("conf/" + name), c.dump(2));
    return "conf/" + name;
  }

  RunResult train(const std::string& config_path, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"train", config_path, "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_pstar(args, dir_.path());
  }

  // Two ranks, `steps` steps, a checkpoint every 3 into `save_dir`.
  void train_two_ranks(int64_t steps, const std::string& save_dir, const std::string& metrics,
                       int nproc = 2) {
    const std::string cfg = write_config(config(steps, 3, save_dir), save_dir + ".json");
    const auto r = train(cfg, {"--nproc", std::to_string(nproc), "--metrics", metrics});
    ASSERT_EQ(r.exit_code, 0) << r;
  }

  RunResult merge(const std::vector<std::string>& args) {
    std::vector<std::string> all{"merge-ckpt"};
    all.insert(all.end(), args.begin(), args.end());
    return run_pstar(all, dir_.path());
  }

  std::vector<std::string> entries(const std::string& sub) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_.path() / sub))
      names.push_back(e.path().filename().string());
    return names;
  }

  ScratchDir dir_;
};

// gpt_parameter_shapes, which merge-ckpt and --reshard rely on, lists the parameters the GPT
// really has, in the order its units are built (the chunk engine's registration order).
TEST(GptParameterShapesTest, FollowTheModel) {
  const model::GptConfig shape{48, 3, 4, 100, 16};
  model::Gpt gpt(shape);
  const auto expected = model::gpt_parameter_shapes(shape);
  const auto params = gpt.named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  std::vector<int64_t> leaf_numels(model::gpt_leaf_module_numels(shape).size(), 0);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].key(), expected[i].name);
    EXPECT_EQ(params[i].value().sizes().vec(), expected[i].shape) << expected[i].name;
    leaf_numels[static_cast<size_t>(expected[i].leaf)] += params[i].value().numel();
  }
  EXPECT_EQ(leaf_numels, model::gpt_leaf_module_numels(shape));
}

// The merged safetensors holds every rank's fp32 masters bit for bit under GPT-2's names, in
// fp32 or converted to bf16, and the config.json beside it trains from it (model.init_from).
TEST_F(MergeCkptTest, MergedSafetensorsEqualTheShardsAndTrainThroughInitFrom) {
  train_two_ranks(3, "ck", "full.jsonl");
  const fs::path step = dir_.path() / "ck/step-00000003";
  const auto r = merge(
      {"--pattern", "ck/step-00000003/ckpt-*.pt", "--num", "2", "-o", "out/model.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "wrote 28 tensors")) << r;
  EXPECT_TRUE(contains(r.err, "out/model.safetensors")) << r;
  EXPECT_EQ(r.out, "out/model.safetensors\n") << r;  // the path written, for scripts

  const auto masters = shard_parameters(step, 2);
  model::GptConfig tiny{64, 2, 4, 256, 32};
  const auto expected = model::gpt_parameter_shapes(tiny);
  ASSERT_EQ(masters.size(), expected.size());
  formats::SafetensorsReader reader(dir_.file("out/model.safetensors"));
  EXPECT_EQ(reader.metadata().at("format"), "pt");  // what Hugging Face's loaders look for
  EXPECT_EQ(reader.metadata().at("pstar.version"), pstar::version());
  ASSERT_EQ(reader.tensors().size(), expected.size());
  for (const auto& p : expected) {
    SCOPED_TRACE(p.name);  // Hugging Face GPT-2 names: transformer.h.0.attn.c_attn.weight, ...
    const formats::TensorInfo* info = reader.find(p.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, formats::DType::kF32);
    EXPECT_EQ(info->shape, p.shape);
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader, *info), masters.at(p.name)));
  }

  // out16/ does not exist yet: merge-ckpt creates it.
  const auto r16 =
      merge({"--dir", "ck/step-00000003", "-o", "out16/model.safetensors", "--dtype", "bf16"});
  ASSERT_EQ(r16.exit_code, 0) << r16;
  formats::SafetensorsReader reader16(dir_.file("out16/model.safetensors"));
  for (const auto& [name, master] : masters) {
    const formats::TensorInfo* info = reader16.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, formats::DType::kBF16) << name;
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader16, *info), master.to(torch::kBFloat16)))
        << name;
  }

  // config.json beside the file: the run's config, starting from the merged weights.
  const json merged_config = json::parse(read_text(dir_.file("out/config.json")));
  EXPECT_EQ(merged_config["model"]["init_from"], "model.safetensors");
  EXPECT_EQ(merged_config["model"]["preset"], "gpt-tiny");
  EXPECT_EQ(merged_config["training"]["save_dir"], "");
  const auto fresh = read_metrics(dir_.file("full.jsonl"));
  ASSERT_EQ(fresh.size(), 3u);
  const auto t = train("out/config.json", {"--set", "training.steps=1", "--metrics", "init.jsonl"});
  ASSERT_EQ(t.exit_code, 0) << t;
  EXPECT_TRUE(contains(t.err, "loaded 28 tensors from")) << t;
  const auto init = read_metrics(dir_.file("init.jsonl"));
  ASSERT_EQ(init.size(), 1u);
  // From the trained weights the first loss is well below a fresh start's (ln 256 = 5.55).
  EXPECT_LT(init[0]["loss"].get<double>(), fresh[0]["loss"].get<double>() - 0.2)
      << "fresh " << fresh[0]["loss"] << ", after 3 steps " << fresh[2]["loss"];
  // Through the bf16 file too (converted back to the run's fp32).
  const auto t16 = train("out16/config.json", {"--set", "training.steps=1", "-q"});
  EXPECT_EQ(t16.exit_code, 0) << t16;
}

// -o without an extension: a Hugging Face folder. A Llama (two ranks) merges into bf16 shards of
// at most 100 KB with an index, under the names and shapes of LlamaForCausalLM, a config.json that
// reads back as the same shape, and the folder trains again through model.init_from.
TEST_F(MergeCkptTest, AFolderOutputIsAHuggingFaceFolderThatTrainsAgain) {
  json c = config(3, 3, "ck");
  c["model"] = {{"preset", "llama-tiny"}, {"seq_len", 32}};
  c["engine"]["device_memory"] = "4MB";
  const auto r0 = train(write_config(c, "llama.json"), {"--nproc", "2", "--metrics", "l.jsonl"});
  ASSERT_EQ(r0.exit_code, 0) << r0;
  const auto r = merge({"--dir", "ck/step-00000003", "-o", "out/tuned", "--dtype", "bf16",
                        "--max-shard-size", "100KB"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "out/tuned\n") << r;

  const formats::HfFolder folder = formats::read_hf_folder(dir_.file("out/tuned"));
  EXPECT_EQ(folder.model_type, "llama");
  EXPECT_GT(folder.shards.size(), 1u);  // 0.5 MB of bf16 tensors over 100 KB shards
  EXPECT_FALSE(folder.index_path.empty());
  const model::LlamaConfig shape =
      model::llama_config_from_hf_json(folder.config_text, folder.config_path);
  const model::LlamaConfig& tiny = *model::find_llama_preset("llama-tiny");
  EXPECT_EQ(shape.num_params(), tiny.num_params());
  EXPECT_EQ(shape.kv_heads, tiny.kv_heads);
  EXPECT_EQ(json::parse(folder.config_text)["torch_dtype"], "bfloat16");
  const auto masters = shard_parameters(dir_.path() / "ck/step-00000003", 2);
  const auto expected = model::llama_parameter_shapes(tiny);
  ASSERT_EQ(folder.shard_of.size(), expected.size());
  for (const auto& p : expected) {
    SCOPED_TRACE(p.name);
    formats::SafetensorsReader reader(folder.shard_of.at(p.name));
    const formats::TensorInfo* info = reader.find(p.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, formats::DType::kBF16);
    EXPECT_EQ(info->shape, p.shape);
    EXPECT_TRUE(
        bitwise_equal(safetensors_tensor(reader, *info), masters.at(p.name).to(torch::kBFloat16)));
  }

  // Trains again from the folder: the first loss is the trained level, below a fresh start's.
  json again = config(1, 0, "");
  again["model"] = {{"init_from", "../out/tuned"}, {"seq_len", 32}};
  again["engine"]["device_memory"] = "4MB";
  const auto t = train(write_config(again, "again.json"), {"--metrics", "again.jsonl"});
  ASSERT_EQ(t.exit_code, 0) << t;
  const auto fresh = read_metrics(dir_.file("l.jsonl"));
  const auto init = read_metrics(dir_.file("again.jsonl"));
  ASSERT_EQ(init.size(), 1u);
  EXPECT_LT(init[0]["loss"].get<double>(), fresh[0]["loss"].get<double>() - 0.1);

  // An existing folder is not replaced.
  const auto twice = merge({"--dir", "ck/step-00000003", "-o", "out/tuned"});
  EXPECT_EQ(twice.exit_code, 2) << twice;
  EXPECT_TRUE(contains(twice.err, "already exists and is not an empty folder")) << twice;
}

// The .pt output is a pickled dict of name -> tensor: pstar's checkpoint reader and Python's
// torch.load both read it.
TEST_F(MergeCkptTest, PtOutputIsADictThatTorchLoadReads) {
  train_two_ranks(3, "ck", "full.jsonl");
  const auto r = merge({"--dir", "ck/step-00000003", "-o", "out/model.pt"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto masters = shard_parameters(dir_.path() / "ck/step-00000003", 2);
  const checkpoint::TensorMap merged = checkpoint::read_checkpoint_file(dir_.file("out/model.pt"));
  ASSERT_EQ(merged.size(), masters.size());
  for (const auto& [name, master] : masters) {
    ASSERT_TRUE(merged.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(merged.at(name), master)) << name;
  }

  const std::string python = python_with_torch();
  if (python.empty())
    GTEST_SKIP() << "no Python with torch (python3 -c 'import torch' fails; Debian: "
                    "apt-get install python3-torch)";
  // weights_only=True: the default of torch.load from PyTorch 2.6 on, whose unpickler refuses
  // every global but the tensor rebuilders it knows (Note [checkpoint pickle] in
  // checkpoint/store.cpp). Passed explicitly so that an older torch (Debian's 1.13 has the
  // argument) checks it too. The checkpoint's own files come from the same writer.
  write_text(dir_.file("load.py"),
             "import json, sys, torch\n"
             "d = torch.load(sys.argv[1], weights_only=True)\n"
             "c = torch.load(sys.argv[2], weights_only=True)\n"
             "assert isinstance(c, dict) and c['__pstar__.step'].item() == 3, c.keys()\n"
             "print(json.dumps({k: [list(v.shape), str(v.dtype)] for k, v in d.items()}))\n");
  const std::string out = dir_.file("python.json");
  const std::string cmd = python + " " + dir_.file("load.py") + " " + dir_.file("out/model.pt") +
                          " " + dir_.file("ck/step-00000003/ckpt-1.pt") + " > " + out + " 2> " +
                          dir_.file("python.err");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir_.file("python.err"));
  const json seen = json::parse(read_text(out));
  ASSERT_EQ(seen.size(), masters.size()) << seen.dump();
  for (const auto& [name, master] : masters) {
    ASSERT_TRUE(seen.contains(name)) << name;
    EXPECT_EQ(seen[name][0].get<std::vector<int64_t>>(), master.sizes().vec()) << name;
    EXPECT_EQ(seen[name][1], "torch.float32") << name;
  }
}

// --reshard writes a checkpoint for another number of ranks that `pstar train --resume` takes:
// to the same number it continues bit-identically; 2 -> 1 and back 1 -> 2 resume and train.
TEST_F(MergeCkptTest, ReshardedCheckpointsResume) {
  train_two_ranks(6, "ck", "full.jsonl");
  const auto full = read_metrics(dir_.file("full.jsonl"));
  ASSERT_EQ(full.size(), 6u);
  const std::string cfg = "conf/ck.json";
  const json manifest = json::parse(read_text(dir_.file("ck/step-00000003/manifest.json")));

  auto resume = [&](const std::string& from, int nproc, const std::string& metrics) {
    return train(cfg, {"--nproc", std::to_string(nproc), "--resume", from, "--metrics", metrics,
                       "--set", "training.save_dir=ck-" + metrics});
  };
  auto expect_losses = [&](const std::string& metrics, const std::string& what) {
    const auto b = read_metrics(dir_.file(metrics));
    ASSERT_EQ(b.size(), 3u) << what;
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(b[i]["loss"].get<double>(), full[i + 3]["loss"].get<double>())
          << what << ", step " << i + 4;
  };

  // 2 -> 2: the same files in all but the writer; bit-identical.
  auto r = merge({"--dir", "ck/step-00000003", "--reshard", "2", "-o", "re2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  auto t = resume("re2", 2, "re2.jsonl");
  ASSERT_EQ(t.exit_code, 0) << t;
  expect_losses("re2.jsonl", "2 -> 2");

  // 2 -> 1.
  r = merge(
      {"--pattern", "ck/step-00000003/ckpt-*.pt", "--num", "2", "--reshard", "1", "-o", "re1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<std::string> files = entries("re1");
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"ckpt-0.pt", "config.json", "manifest.json"}));
  const json m1 = json::parse(read_text(dir_.file("re1/manifest.json")));
  EXPECT_EQ(m1["world_size"], 1);
  EXPECT_EQ(m1["step"], 3);
  EXPECT_EQ(m1["run_id"], manifest["run_id"]);
  EXPECT_EQ(manifest["pstar_version"], pstar::version());  // what pstar --version prints
  EXPECT_EQ(m1["pstar_version"], pstar::version());
  const checkpoint::TensorMap one = checkpoint::read_checkpoint_file(dir_.file("re1/ckpt-0.pt"));
  EXPECT_EQ(one.at("__pstar__.world_size").item<int64_t>(), 1);
  EXPECT_EQ(one.at("__pstar__.step").item<int64_t>(), 3);
  EXPECT_EQ(one.size(), 28u * 3 + 9);  // every parameter with its Adam state, and the run state
  t = resume("re1", 1, "re1.jsonl");
  ASSERT_EQ(t.exit_code, 0) << t;
  EXPECT_TRUE(contains(t.err, "resumed from re1/ckpt-0.pt at step 3")) << t;
  const auto single = read_metrics(dir_.file("re1.jsonl"));
  ASSERT_EQ(single.size(), 3u);
  for (const json& m : single) EXPECT_TRUE(std::isfinite(m["loss"].get<double>())) << m.dump();

  // 1 -> 2, from the one-rank checkpoint. pstar's GPT draws no random numbers while training, so
  // this too continues the original run exactly (Note [reshard] in checkpoint/reshard.cpp).
  r = merge({"--dir", "re1", "--reshard", "2", "-o", "re12"});
  ASSERT_EQ(r.exit_code, 0) << r;
  t = resume("re12", 2, "re12.jsonl");
  ASSERT_EQ(t.exit_code, 0) << t;
  expect_losses("re12.jsonl", "2 -> 1 -> 2");

  // More ranks than chunks: the same error the engine would give, and no directory.
  r = merge({"--dir", "ck/step-00000003", "--reshard", "8", "-o", "re8"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "fewer than the 8 ranks")) << r;
  EXPECT_FALSE(fs::exists(dir_.path() / "re8"));
  // An existing directory is not replaced.
  r = merge({"--dir", "ck/step-00000003", "--reshard", "1", "-o", "re1"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "already exists")) << r;
}

// Note [chunk sizes]: one rank lays gpt-tiny out with chunks of several sizes (modules larger than
// default_chunk_size in chunks of their own), two ranks with one raised size. Checkpoints hold
// named parameters, so either resumes on the other, directly and through merge-ckpt --reshard,
// continuing the run within the bound one and two ranks keep (Note [reshard]).
TEST_F(MergeCkptTest, CheckpointsMoveBetweenChunkLayouts) {
  json c = config(6, 3, "mx");
  c["default_chunk_size"] = 4000;
  c["engine"]["device_memory"] = "32MB";  // two ranks' raised chunks are large
  const std::string cfg = write_config(c, "mx.json");
  auto r = train(cfg, {"--nproc", "1", "--metrics", "one.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "get a chunk of their own")) << r;
  // The same global batch on two ranks: one sequence each.
  const std::string half = "train_micro_batch_size_per_gpu=1";
  r = train(cfg, {"--nproc", "2", "--metrics", "two.jsonl", "--set", "training.save_dir=mx2",
                  "--set", half});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "raising the chunk size")) << r;
  const auto one = read_metrics(dir_.file("one.jsonl"));
  const auto two = read_metrics(dir_.file("two.jsonl"));
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(two.size(), 6u);
  auto resume = [&](const std::string& from, int nproc, const std::string& metrics) {
    const auto t = train(cfg, {"--nproc", std::to_string(nproc), "--resume", from, "--metrics",
                               metrics, "--set", "training.save_dir=ck-" + metrics, "--set",
                               nproc == 2 ? half : "train_micro_batch_size_per_gpu=2"});
    EXPECT_EQ(t.exit_code, 0) << t;
    return read_metrics(dir_.file(metrics));
  };
  auto expect_near = [](const std::vector<json>& got, const std::vector<json>& full,
                        const std::string& what) {
    ASSERT_EQ(got.size(), 3u) << what;
    for (size_t i = 0; i < 3; ++i) {
      const double want = full[i + 3]["loss"].get<double>();
      EXPECT_NEAR(got[i]["loss"].get<double>(), want, 1e-5 * std::abs(want))
          << what << ", step " << i + 4;
    }
  };
  // One rank's several sizes -> two ranks, directly and through merge-ckpt: the same numbers.
  const auto direct = resume("mx/step-00000003", 2, "direct2.jsonl");
  r = merge({"--dir", "mx/step-00000003", "--reshard", "2", "-o", "re2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto merged = resume("re2", 2, "merged2.jsonl");
  expect_near(direct, one, "1 -> 2 directly");
  ASSERT_EQ(merged.size(), direct.size());
  for (size_t i = 0; i < direct.size(); ++i)
    EXPECT_EQ(merged[i]["loss"].get<double>(), direct[i]["loss"].get<double>()) << i;
  // Two ranks' one size -> one rank's several sizes.
  expect_near(resume("mx2/step-00000003", 1, "back1.jsonl"), two, "2 -> 1");
}

// Sets of files that are not one checkpoint: each a clear error naming the file, with the exit
// code of its kind (docs/cli.md), and nothing written.
TEST_F(MergeCkptTest, BadFileSetsAreClearErrorsAndWriteNothing) {
  train_two_ranks(6, "a", "a.jsonl");
  train_two_ranks(3, "b", "b.jsonl");
  const fs::path a3 = dir_.path() / "a/step-00000003";
  const fs::path a6 = dir_.path() / "a/step-00000006";
  const fs::path b3 = dir_.path() / "b/step-00000003";
  auto make = [&](const std::string& name,
                  const std::vector<std::pair<fs::path, std::string>>& files) {
    fs::create_directories(dir_.path() / "bad" / name);
    for (const auto& [from, to] : files)
      fs::copy_file(from, dir_.path() / "bad" / name / to, fs::copy_options::overwrite_existing);
  };
  struct Case {
    std::string label;
    std::vector<std::string> args;
    int exit_code;
    std::vector<std::string> message;
  };
  make("missing", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  make("dup", {{a3 / "ckpt-0.pt", "first.pt"}, {a3 / "ckpt-0.pt", "second.pt"}});
  make("runs/x", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  make("runs/y", {{b3 / "ckpt-1.pt", "ckpt-1.pt"}, {b3 / "manifest.json", "manifest.json"}});
  make("steps", {{a3 / "ckpt-0.pt", "ckpt-0.pt"},
                 {a6 / "ckpt-1.pt", "ckpt-1.pt"},
                 {a3 / "manifest.json", "manifest.json"}});
  make("steps-unverified", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a6 / "ckpt-1.pt", "ckpt-1.pt"}});
  make("corrupt", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  const std::string whole = read_text((a3 / "ckpt-1.pt").string());
  write_text(dir_.file("bad/corrupt/ckpt-1.pt"), whole.substr(0, whole.size() / 2));
  make("corrupt-unverified", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}});
  write_text(dir_.file("bad/corrupt-unverified/ckpt-1.pt"), whole.substr(0, whole.size() / 2));
  make("newer", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  {
    // A file of a newer format that its manifest vouches for: the format check, not the
    // checksum, refuses it.
    checkpoint::TensorMap t = checkpoint::read_checkpoint_file((a3 / "ckpt-1.pt").string());
    t["__pstar__.format_version"] = torch::tensor(int64_t{2});
    checkpoint::CheckpointManifest m = checkpoint::read_manifest(dir_.file("bad/newer"));
    m.digests[1] = checkpoint::write_checkpoint_file(dir_.file("bad/newer/ckpt-1.pt"),
                                                     checkpoint::TensorList(t.begin(), t.end()));
    checkpoint::write_manifest(dir_.file("bad/newer"), m);
  }

  const std::vector<Case> cases = {
      {"missing rank",
       {"--pattern", "bad/missing/ckpt-*.pt", "--num", "2"},
       2,
       {"--num 2 but 1 checkpoint file(s) matched", "bad/missing/ckpt-0.pt", "missing: ckpt-1.pt"}},
      {"duplicated rank",
       {"--pattern", "bad/dup/*.pt", "--num", "2", "--unverified"},
       4,
       {"bad/dup/second.pt and bad/dup/first.pt both hold rank 0"}},
      {"two runs",
       {"--pattern", "bad/runs/*/ckpt-*.pt", "--num", "2"},
       4,
       {"bad/runs/y/manifest.json describes run", "bad/runs/x/manifest.json",
        "all files must come from one checkpoint"}},
      {"two steps (the manifest's checksum)",
       {"--dir", "bad/steps"},
       4,
       {"bad/steps/ckpt-1.pt", "but bad/steps/manifest.json records", "nothing was merged"}},
      {"two steps (unverified, the step)",
       {"--pattern", "bad/steps-unverified/ckpt-*.pt", "--num", "2", "--unverified"},
       4,
       {"bad/steps-unverified/ckpt-1.pt: at step 6 but bad/steps-unverified/ckpt-0.pt is at "
        "step 3"}},
      {"--num above",
       {"--pattern", "a/step-00000003/ckpt-*.pt", "--num", "3"},
       2,
       {"--num 3 but 2 checkpoint file(s) matched", "missing: ckpt-2.pt"}},
      {"--num below",
       {"--pattern", "a/step-00000003/ckpt-0.pt", "--num", "1"},
       2,
       {"a/step-00000003/manifest.json: the checkpoint was written by 2 rank(s), but --num is 1"}},
      {"truncated file",
       {"--dir", "bad/corrupt"},
       4,
       {"bad/corrupt/ckpt-1.pt has", "bytes but bad/corrupt/manifest.json records",
        "(truncated, or not the file this checkpoint wrote)"}},
      {"truncated file, unverified",
       {"--pattern", "bad/corrupt-unverified/ckpt-*.pt", "--num", "2", "--unverified"},
       4,
       {"bad/corrupt-unverified/ckpt-1.pt: not a readable checkpoint (truncated or corrupt"}},
      {"newer format",
       {"--dir", "bad/newer"},
       4,
       {"bad/newer/ckpt-1.pt: checkpoint format version 2 is not supported by this pstar "
        "(expected 1)"}},
      {"no files", {"--pattern", "nowhere/ckpt-*.pt", "--num", "2"}, 3, {"matches no file"}},
  };
  for (const Case& c : cases) {
    for (const std::string output : {"out/model.safetensors", "out/model.pt"}) {
      std::vector<std::string> args = c.args;
      args.insert(args.end(), {"-o", output});
      const auto r = merge(args);
      EXPECT_EQ(r.exit_code, c.exit_code) << c.label << "\n" << r;
      for (const auto& part : c.message) EXPECT_TRUE(contains(r.err, part)) << c.label << "\n" << r;
      EXPECT_TRUE(entries("out").empty()) << c.label << ": something was written";
    }
  }

  // An output kind pstar does not write, and an output beside the checkpoint's own config.json.
  auto r = merge({"--dir", "a/step-00000003", "-o", "out/model.bin"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "-o out/model.bin: unknown output kind '.bin'")) << r;
  r = merge({"--dir", "a/step-00000003", "-o", "a/step-00000003/model.safetensors"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "would replace the checkpoint's own")) << r;
  EXPECT_FALSE(fs::exists(a3 / "model.safetensors"));
  EXPECT_TRUE(entries("out").empty());
}

// Note [merge passes]: merging into safetensors holds one file's tensors at a time, not the
// model. Eight ranks' files of a 25M-parameter GPT (100 MB of fp32 parameters, 300 MB with Adam
// state) written here through the engine's checkpoint writer; pstar's own peak resident memory
// (wait4) is compared with that of merging a tiny checkpoint, which costs the same start-up.
TEST_F(MergeCkptTest, StreamingMergeHoldsOneFileNotTheModel) {
  constexpr int64_t kRanks = 8;
  // Writes a synthetic checkpoint of `ranks` files for a GPT shape, distributed as the chunk
  // engine would; returns the largest file's tensor bytes and the parameters' bytes.
  auto write_checkpoint = [&](const std::string& sub, const json& model, int64_t ranks) {
    const fs::path step = dir_.path() / sub;
    fs::create_directories(step);
    const json cfg = {{"model", model},
                      {"data", {{"text", dir_.file("conf/corpus.txt")}}},
                      {"default_chunk_size", 1 << 20},
                      // A run's config.json holds the decided value (Note [cpu embedding]).
                      {"use_cpu_embedding", true}};
    write_text((step / "config.json").string(), cfg.dump(2));
    const plan::ModelChunkMap map =
        plan::model_chunk_map(config::load_train_config((step / "config.json").string()), ranks);
    int64_t largest = 0, params = 0;
    std::vector<checkpoint::FileDigest> digests;
    torch::manual_seed(7);
    for (int64_t r = 0; r < ranks; ++r) {
      checkpoint::TensorList tensors;
      int64_t bytes = 0;
      for (size_t i = 0; i < map.params.size(); ++i) {
        if (map.chunks[i] % ranks != r) continue;
        const auto& p = map.params[i];
        for (const std::string suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
          tensors.emplace_back(p.name + suffix, torch::randn(p.shape));
          bytes += tensors.back().second.nbytes();
        }
        params += tensors[tensors.size() - 3].second.nbytes();
      }
      for (const char* name : {"format_version", "step", "tokens", "skipped_steps", "adam_step",
                               "rank", "world_size"}) {
        const int64_t value = std::string(name) == "rank"         ? r
                              : std::string(name) == "world_size" ? ranks
                                                                  : 1;
        tensors.emplace_back(std::string("__pstar__.") + name, torch::tensor(value));
      }
      tensors.emplace_back("__pstar__.loss_scaler", torch::ones({3}, torch::kFloat64));
      tensors.emplace_back("__pstar__.rng", at::detail::getDefaultCPUGenerator().get_state());
      digests.push_back(
          checkpoint::write_checkpoint_file(checkpoint::checkpoint_file(step, r), tensors));
      largest = std::max(largest, bytes);
    }
    checkpoint::write_manifest(step.string(),
                               checkpoint::CheckpointManifest{ranks, 1, "synthetic", digests});
    return std::make_pair(largest, params);
  };
  write_checkpoint(
      "tiny", {{"hidden", 64}, {"layers", 1}, {"heads", 4}, {"vocab_size", 256}, {"seq_len", 64}},
      kRanks);
  const auto [largest, model_bytes] = write_checkpoint(
      "big", {{"hidden", 512}, {"layers", 8}, {"heads", 8}, {"vocab_size", 256}, {"seq_len", 64}},
      kRanks);
  ASSERT_GT(model_bytes, 100'000'000);
  ASSERT_LT(largest, model_bytes / 2);
  fs::create_directories(dir_.path() / "out-tiny");

  const Measured base = run_measured(
      {"merge-ckpt", "--dir", "tiny", "-o", "out-tiny/model.safetensors"}, dir_.path());
  ASSERT_EQ(base.result.exit_code, 0) << base.result;
  const Measured big =
      run_measured({"merge-ckpt", "--dir", "big", "-o", "out/model.safetensors"}, dir_.path());
  ASSERT_EQ(big.result.exit_code, 0) << big.result;
  // The parameters and a header of a few KiB.
  const auto file_bytes = static_cast<int64_t>(fs::file_size(dir_.file("out/model.safetensors")));
  EXPECT_GT(file_bytes, model_bytes);
  EXPECT_LT(file_bytes, model_bytes + (int64_t{1} << 20));

  const int64_t grown = big.max_rss_bytes - base.max_rss_bytes;
  std::printf(
      "[ merge    ] model %.1f MB fp32 parameters (%.1f MB with Adam state) in %lld files, "
      "largest file %.1f MB; peak RSS %.1f MB vs %.1f MB for a tiny checkpoint: +%.1f MB\n",
      model_bytes / 1e6, 3 * model_bytes / 1e6, static_cast<long long>(kRanks), largest / 1e6,
      big.max_rss_bytes / 1e6, base.max_rss_bytes / 1e6, grown / 1e6);
  // One file's tensors (parameters and Adam state, as read) plus allocator slack; the whole model
  // (parameters alone) would be over twice the largest file.
  EXPECT_LT(grown, largest * 3 / 2)
      << "largest file " << largest << " bytes, model " << model_bytes;
  EXPECT_LT(grown, model_bytes * 3 / 4);
  // pstar's own accounting says the same.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(big.result.err, m, std::regex(R"(held at most ([0-9.]+) MiB)")))
      << big.result;
  EXPECT_NEAR(std::stod(m[1]) * 1048576.0, static_cast<double>(largest), 0.01 * largest);

  // And the merge is right: spot-check a tensor from the last rank against its file.
  formats::SafetensorsReader reader(dir_.file("out/model.safetensors"));
  EXPECT_EQ(reader.tensors().size(), 2 + 8 * 12 + 2u);
  const checkpoint::TensorMap last = checkpoint::read_checkpoint_file(
      checkpoint::checkpoint_file(dir_.path() / "big", kRanks - 1));
  for (const auto& [name, t] : last) {
    if (!is_parameter_name(last, name)) continue;
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader, *reader.find(name)), t)) << name;
  }
}

// Note [merge checks]: every shard is checked against the size and CRC-32 that the checkpoint's
// manifest.json records before it is read. Bytes flipped inside a tensor's data leave the archive
// readable (the reader alone would merge them into the model); a truncated shard and one from
// another step are refused the same way; each names the shard and writes nothing, --unverified
// or not. A set without a manifest is refused unless --unverified.
TEST_F(MergeCkptTest, ShardsThatFailTheirManifestChecksumAreRefusedAndNothingIsWritten) {
  train_two_ranks(6, "ck", "full.jsonl");
  const fs::path a3 = dir_.path() / "ck/step-00000003";
  const fs::path a6 = dir_.path() / "ck/step-00000006";
  auto copy_step = [&](const std::string& name) {
    const fs::path to = dir_.path() / "bad" / name;
    fs::create_directories(to);
    for (const char* f : {"ckpt-0.pt", "ckpt-1.pt", "manifest.json", "config.json"})
      fs::copy_file(a3 / f, to / f);
    return to;
  };

  // Flipped bytes in the middle of the largest tensor of rank 1's file: find its data in the
  // archive (stored uncompressed) and invert 8 bytes of it.
  const fs::path flipped = copy_step("flipped");
  {
    const checkpoint::TensorMap t =
        checkpoint::read_checkpoint_file((flipped / "ckpt-1.pt").string());
    std::string largest;
    for (const auto& [name, tensor] : t)
      if (largest.empty() || tensor.nbytes() > t.at(largest).nbytes()) largest = name;
    const at::Tensor& victim = t.at(largest);
    ASSERT_GT(victim.nbytes(), 64u);
    std::string bytes = read_text((flipped / "ckpt-1.pt").string());
    const std::string data(static_cast<const char*>(victim.data_ptr()), victim.nbytes());
    const size_t at = bytes.find(data);
    ASSERT_NE(at, std::string::npos) << "tensor data of " << largest << " not found in the file";
    for (size_t i = 0; i < 8; ++i) bytes[at + victim.nbytes() / 2 + i] ^= '\xff';
    write_text((flipped / "ckpt-1.pt").string(), bytes);
    // The archive is still readable and the tensor now differs: only the checksum can tell.
    const checkpoint::TensorMap damaged =
        checkpoint::read_checkpoint_file((flipped / "ckpt-1.pt").string());
    EXPECT_FALSE(bitwise_equal(damaged.at(largest), victim)) << largest;
  }
  const fs::path truncated = copy_step("truncated");
  {
    const std::string bytes = read_text((truncated / "ckpt-1.pt").string());
    write_text((truncated / "ckpt-1.pt").string(), bytes.substr(0, bytes.size() - 100));
  }
  const fs::path other_step = copy_step("other-step");
  fs::copy_file(a6 / "ckpt-1.pt", other_step / "ckpt-1.pt", fs::copy_options::overwrite_existing);

  const json manifest = json::parse(read_text((a3 / "manifest.json").string()));
  char want[16];
  std::snprintf(want, sizeof want, "0x%08x", manifest["crc32"][1].get<uint32_t>());
  const checkpoint::FileDigest found_flipped =
      checkpoint::file_digest((flipped / "ckpt-1.pt").string());
  char found[16];
  std::snprintf(found, sizeof found, "0x%08x", found_flipped.crc32);
  struct Case {
    std::string dir;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"bad/flipped",
       {"bad/flipped/ckpt-1.pt: CRC-32 is " + std::string(found) +
            " but bad/flipped/manifest.json records " + want,
        "(the file is corrupt, or not the one this checkpoint wrote); nothing was merged"}},
      {"bad/truncated",
       {"bad/truncated/ckpt-1.pt has", "bytes but bad/truncated/manifest.json records"}},
      {"bad/other-step", {"bad/other-step/ckpt-1.pt", "but bad/other-step/manifest.json records"}},
  };
  for (const Case& c : cases) {
    for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
             {"-o", "out/model.safetensors"}, {"-o", "out/model.pt", "--unverified"}}) {
      std::vector<std::string> args{"--dir", c.dir};
      args.insert(args.end(), extra.begin(), extra.end());
      const auto r = merge(args);
      EXPECT_EQ(r.exit_code, 4) << c.dir << "\n" << r;
      for (const auto& part : c.message) EXPECT_TRUE(contains(r.err, part)) << c.dir << "\n" << r;
      EXPECT_TRUE(r.out.empty()) << r;
      EXPECT_TRUE(entries("out").empty()) << c.dir << ": something was written";
    }
    // Nor beside the files, without -o.
    const auto r = merge({"--pattern", c.dir + "/ckpt-*.pt", "--num", "2"});
    EXPECT_EQ(r.exit_code, 4) << r;
    EXPECT_FALSE(fs::exists(dir_.path() / c.dir / "ckpt-merged.pt")) << c.dir;
  }

  // No manifest: said so, with the flag that merges anyway.
  const fs::path bare = dir_.path() / "bare";
  fs::create_directories(bare);
  for (const char* f : {"ckpt-0.pt", "ckpt-1.pt"}) fs::copy_file(a3 / f, bare / f);
  auto r = merge({"--pattern", "bare/ckpt-*.pt", "--num", "2", "-o", "out/model.safetensors"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "no manifest.json vouches for bare/ckpt-0.pt")) << r;
  EXPECT_TRUE(contains(r.err, "bare/manifest.json is missing")) << r;
  EXPECT_TRUE(contains(r.err, "give --unverified to merge them unchecked")) << r;
  EXPECT_TRUE(entries("out").empty());
  r = merge(
      {"--pattern", "bare/ckpt-*.pt", "--num", "2", "-o", "out/model.safetensors", "--unverified"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "warning: merge-ckpt: 2 file(s) merged without a checksum")) << r;
  // The same model as the verified merge of the intact checkpoint.
  formats::SafetensorsReader reader(dir_.file("out/model.safetensors"));
  for (const auto& [name, master] : shard_parameters(a3, 2))
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader, *reader.find(name)), master)) << name;
}

// The command as a PatrickStar user writes it, inside a step directory: no -o. The merged file
// goes beside the shards, named after the pattern, its path printed; it is never replaced
// without --force, and a later run's pattern does not take it for a shard.
TEST_F(MergeCkptTest, WithoutOutputWritesBesideTheShardsAndPrintsThePath) {
  // The issue's command as written: a 4-rank checkpoint of step 6.
  train_two_ranks(6, "ck", "full.jsonl", 4);
  const fs::path step = dir_.path() / "ck/step-00000006";
  const std::string config_before = read_text((step / "config.json").string());
  auto merge_in_step = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args{"merge-ckpt", "--pattern", "ckpt-*.pt", "--num", "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_pstar(args, step);
  };
  auto r = merge_in_step({});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "ckpt-merged.pt\n") << r;
  const auto masters = shard_parameters(step, 4);
  auto expect_merged = [&] {
    const checkpoint::TensorMap merged =
        checkpoint::read_checkpoint_file((step / "ckpt-merged.pt").string());
    ASSERT_EQ(merged.size(), masters.size());
    for (const auto& [name, master] : masters) {
      ASSERT_TRUE(merged.count(name)) << name;
      EXPECT_TRUE(bitwise_equal(merged.at(name), master)) << name;
    }
  };
  expect_merged();
  // The step's config.json is the run's own: left as it was, and the log says why none was
  // written for the merged file.
  EXPECT_EQ(read_text((step / "config.json").string()), config_before);
  EXPECT_TRUE(contains(r.err, "no config.json written beside ckpt-merged.pt")) << r;

  // Again: refused, the file untouched.
  write_text((step / "ckpt-merged.pt").string(), "not replaced");
  r = merge_in_step({});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "ckpt-merged.pt already exists; give --force to replace it")) << r;
  EXPECT_EQ(read_text((step / "ckpt-merged.pt").string()), "not replaced");
  // --force replaces it; ckpt-*.pt matches it too, but it is not counted as a shard.
  r = merge_in_step({"--force", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "ckpt-merged.pt\n") << r;
  expect_merged();

  // A safetensors name from the pattern, from outside the directory; and --dir's default.
  r = merge({"--pattern", "ck/step-00000006/ckpt-*.safetensors", "--num", "4"});
  EXPECT_EQ(r.exit_code, 3) << r;  // no shard matches *.safetensors
  r = merge({"--dir", "ck/step-00000006", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "ck/step-00000006/ckpt-merged.pt\n") << r;
  expect_merged();

  // Patterns that name no single place or name: -o is asked for, nothing written.
  for (const std::string pattern : {"ck/*/ckpt-*.pt", "ck/step-00000006/ckpt-?.pt",
                                    "ck/step-00000006/*-*.pt", "ck/step-00000006/ckpt-*"}) {
    r = merge({"--pattern", pattern, "--num", "4"});
    EXPECT_EQ(r.exit_code, 2) << pattern << "\n" << r;
    EXPECT_TRUE(contains(r.err, "give the output with -o")) << pattern << "\n" << r;
  }
}

// Note [resume resharding]: a 2-rank checkpoint resumes with --nproc 1 and --nproc 4, resharded
// on the fly, and continues exactly as a resume from `merge-ckpt --reshard` of it does; the log
// says it resharded.
TEST_F(MergeCkptTest, ResumeOnAnotherNumberOfRanksReshardsLikeMergeCkpt) {
  train_two_ranks(6, "ck", "full.jsonl");
  const std::string cfg = "conf/ck.json";
  auto resume = [&](const std::string& from, int nproc, const std::string& metrics) {
    return train(cfg, {"--nproc", std::to_string(nproc), "--resume", from, "--metrics", metrics,
                       "--set", "training.save_dir=ck-" + metrics});
  };
  for (const int nproc : {1, 4}) {
    SCOPED_TRACE("--nproc " + std::to_string(nproc));
    const std::string n = std::to_string(nproc);
    auto r = merge({"--dir", "ck/step-00000003", "--reshard", n, "-o", "re" + n});
    ASSERT_EQ(r.exit_code, 0) << r;
    auto t = resume("re" + n, nproc, "merged" + n + ".jsonl");
    ASSERT_EQ(t.exit_code, 0) << t;
    EXPECT_FALSE(contains(t.err, "resharding")) << t;
    t = resume("ck/step-00000003", nproc, "direct" + n + ".jsonl");
    ASSERT_EQ(t.exit_code, 0) << t;
    EXPECT_TRUE(contains(t.err,
                         "resume: resharding ck/step-00000003 from the 2 rank(s) that "
                         "wrote it to this run's " +
                             n))
        << t;
    EXPECT_TRUE(contains(t.err, "at step 3")) << t;
    const auto merged = read_metrics(dir_.file("merged" + n + ".jsonl"));
    const auto direct = read_metrics(dir_.file("direct" + n + ".jsonl"));
    ASSERT_EQ(merged.size(), 3u);
    ASSERT_EQ(direct.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(direct[i]["step"], merged[i]["step"]);
      EXPECT_EQ(direct[i]["loss"].get<double>(), merged[i]["loss"].get<double>())
          << "step " << direct[i]["step"];
    }
    // The new run's own checkpoint is one of the new number of ranks.
    const json m =
        json::parse(read_text(dir_.file("ck-direct" + n + ".jsonl/step-00000006/manifest.json")));
    EXPECT_EQ(m["world_size"], nproc);
  }
  // A damaged old file is named before anything is loaded, by whichever rank checked it.
  std::string bytes = read_text(dir_.file("ck/step-00000003/ckpt-1.pt"));
  bytes[bytes.size() / 2] ^= 0x20;
  write_text(dir_.file("ck/step-00000003/ckpt-1.pt"), bytes);
  const auto t = resume("ck/step-00000003", 1, "bad.jsonl");
  EXPECT_EQ(t.exit_code, 4) << t;
  EXPECT_TRUE(contains(t.err, "ck/step-00000003/ckpt-1.pt: CRC-32 is")) << t;
}

}  // namespace
}  // namespace pstar::cmd
