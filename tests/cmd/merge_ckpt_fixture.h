// What the `pstar merge-ckpt` tests share (merge_ckpt_test.cpp, merge_ckpt_reshard_test.cpp,
// merge_ckpt_checks_test.cpp): checkpoints written by `pstar train --nproc 2` in a scratch
// directory, the pstar binary run as a subprocess, and the engine's own readers to check what it
// wrote.
#pragma once

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
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "pstar/formats/config.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/gpt.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/hf_decoder_config.h"
#include "pstar/plan/memory_plan.h"
#include "test_util.h"

namespace pstar::cmd::merge_testing {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::testing::python_with_torch;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

inline bool is_parameter_name(const checkpoint::TensorMap& tensors, const std::string& name) {
  if (name.rfind("__pstar__.", 0) == 0) return false;
  for (const std::string suffix : {".exp_avg", ".exp_avg_sq"}) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        tensors.count(name.substr(0, name.size() - suffix.size())))
      return false;
  }
  return true;
}

// Every rank's fp32 master parameters, by name; the pieces of a split module's tensor (Note
// [checkpoint pieces]) joined by hand from their names and the recorded shape.
inline std::map<std::string, at::Tensor> shard_parameters(const fs::path& step_dir, int64_t ranks) {
  std::map<std::string, at::Tensor> params;
  std::map<std::string, int64_t> joined;  // elements filled so far
  for (int64_t r = 0; r < ranks; ++r) {
    const checkpoint::TensorMap tensors =
        checkpoint::read_checkpoint_file(checkpoint::checkpoint_file(step_dir, r));
    for (const auto& [name, t] : tensors) {
      if (!is_parameter_name(tensors, name)) continue;
      const auto piece = checkpoint::parse_piece_name(name);
      if (!piece) {
        EXPECT_TRUE(params.emplace(name, t).second) << name << " is in two ranks' files";
        continue;
      }
      const at::Tensor shape = tensors.at(checkpoint::shape_name(piece->first));
      at::Tensor& whole = params[piece->first];
      if (!whole.defined())
        whole = torch::full(c10::IntArrayRef(shape.data_ptr<int64_t>(), shape.numel()), NAN);
      whole.reshape({-1}).slice(0, piece->second, piece->second + t.numel()).copy_(t);
      joined[piece->first] += t.numel();
    }
  }
  for (const auto& [name, n] : joined)
    EXPECT_EQ(n, params.at(name).numel()) << name << ": its pieces do not cover it";
  return params;
}

inline bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

inline at::Tensor safetensors_tensor(const formats::SafetensorsReader& reader,
                                     const formats::TensorInfo& info) {
  const auto type = info.dtype == formats::DType::kF32    ? torch::kFloat32
                    : info.dtype == formats::DType::kBF16 ? torch::kBFloat16
                                                          : torch::kFloat16;
  at::Tensor t = torch::empty(info.shape, torch::dtype(type));
  std::memcpy(t.data_ptr(), reader.data(info), info.size_bytes);
  return t;
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
    return train_on_cpu(config_path, extra, dir_.path());
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

}  // namespace pstar::cmd::merge_testing
