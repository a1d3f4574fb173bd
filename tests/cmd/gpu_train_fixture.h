// What the `pstar train` tests on GPUs share (train_shared_gpu_test.cpp, label gpu;
// train_devices_test.cpp, label multidevice): the multi-rank fixture, skipped with the reason
// where the build has no CUDA device tier or the machine too few GPUs, and `pstar train --device
// cuda` with the GPUs a test makes visible.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "pstar/tier/device_tier.h"
#include "train_dist_fixture.h"

namespace pstar::cmd::dist_testing {

class GpuTrainTest : public DistTrainTest {
 protected:
  // `visible`: CUDA_VISIBLE_DEVICES for every run; `min_gpus`: the GPUs the tests need.
  GpuTrainTest(std::string visible, int min_gpus)
      : visible_{"CUDA_VISIBLE_DEVICES=" + std::move(visible)}, min_gpus_(min_gpus) {}

  void SetUp() override {
    if (!tier::cuda_tier_built())
      GTEST_SKIP() << "this build has no CUDA device tier (it needs a CUDA LibTorch; docs/cuda.md)";
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is usable here";
    if (static_cast<int>(torch::cuda::device_count()) < min_gpus_)
      GTEST_SKIP() << "these tests need " << min_gpus_ << " GPUs; this machine has "
                   << torch::cuda::device_count();
    DistTrainTest::SetUp();
  }

  RunResult train_on_gpu(const std::string& config_path, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"train", config_path, "--device", "cuda", "--dist-timeout", "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_pstar(args, dir_.path(), visible_);
  }

  // One rank started by hand with torchrun's variables, on the visible GPUs.
  Spawned spawn_gpu_rank(const std::string& config_path, int rank, int world, int port,
                         const std::vector<std::string>& extra = {}) {
    return spawn_rank(config_path, rank, world, port, extra, "cuda", visible_);
  }

  // What one_and_two_ranks ran: rank 0's metrics of each, and the two-rank run's output.
  struct OneAndTwo {
    std::vector<json> one, two;
    RunResult two_run;
  };
  // gpt-tiny on one GPU rank and on two ranks (the same global batch of 4 sequences: micro-batch
  // 4, then 2 each; 6 steps; engine.device_memory 1GiB) with `distributed` for both, each run
  // `name`d in its files. Checks that both ran, that each of the two ranks holds half the model
  // data (within a chunk), and that it stages its GPU payloads through host blocks every step
  // (`staged`: gloo) or never (NCCL moves them in GPU memory, Note [device collectives]).
  OneAndTwo one_and_two_ranks(const json& distributed, const std::string& name,
                              bool staged = true) {
    constexpr int64_t kSteps = 6, kGlobalBatch = 4;
    OneAndTwo out;
    int64_t whole_model_data = 0, chunk_whole = 0;
    for (int64_t n : {1, 2}) {
      json c = config(kGlobalBatch / n, kSteps);
      c["engine"]["device_memory"] = "1GiB";
      c["distributed"] = distributed;
      const std::string run = name + "-" + std::to_string(n);
      const auto r = train_on_gpu(write_config(c, run + ".json"),
                                  {"--nproc", std::to_string(n), "--metrics", run + ".jsonl"});
      EXPECT_EQ(r.exit_code, 0) << r;
      std::vector<json> rank0 = read_metrics(dir_.file(run + ".jsonl"));
      EXPECT_EQ(rank0.size(), static_cast<size_t>(kSteps)) << r;
      if (n == 1) {
        const ChunkPlan plan = parse_chunk_plan(r.err);
        chunk_whole = plan.chunk_size * plan.bytes_per_param;
        if (!rank0.empty()) whole_model_data = rank0.back()["model_data_bytes"].get<int64_t>();
        out.one = std::move(rank0);
        continue;
      }
      for (int64_t rank = 0; rank < n; ++rank) {
        const std::string file =
            dir_.file(run + ".jsonl" + (rank == 0 ? "" : ".rank" + std::to_string(rank)));
        for (const json& m : read_metrics(file)) {
          EXPECT_NEAR(static_cast<double>(m["model_data_bytes"].get<int64_t>()),
                      static_cast<double>(whole_model_data) / n, static_cast<double>(chunk_whole))
              << "rank " << rank << ", step " << m["step"];
          if (staged) {
            EXPECT_GT(m["comm_staged_bytes"].get<int64_t>(), 0)
                << "GPU payloads travel through host blocks over gloo: " << m.dump();
          } else {
            EXPECT_EQ(m["comm_staged_bytes"].get<int64_t>(), 0)
                << "NCCL reads and writes the GPU payloads in place: " << m.dump();
          }
        }
      }
      out.two = std::move(rank0);
      out.two_run = r;
    }
    return out;
  }

  const std::vector<std::string> visible_;
  const int min_gpus_;
};

}  // namespace pstar::cmd::dist_testing
