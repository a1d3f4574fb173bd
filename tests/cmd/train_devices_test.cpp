// Several ranks of `pstar train` on a machine with several GPUs (issue 36): each local rank
// computes on a GPU of its own (local rank r on cuda:r of the visible ones) and the start-up log
// names it; over gloo (the collectives staged through host memory, Note [staged collectives]) two
// ranks on two GPUs track one GPU rank, each holding half the model data; "auto" with ranks on GPUs
// of their own names nccl, which no build has yet. Label "multidevice", which `ctest -L gpu`
// (a regular expression) does not select: scripts/gpu-verify.sh runs these in a phase of their own
// when it finds two GPUs or more. Skipped, with the reason, without a CUDA build or with fewer
// than two GPUs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "pstar/tier/device_tier.h"
#include "train_dist_fixture.h"

namespace pstar::cmd {
namespace {

using namespace pstar::cmd::dist_testing;  // NOLINT(build/namespaces): the shared fixture

// The first two GPUs, whatever the machine has.
const std::vector<std::string> kTwoGpus{"CUDA_VISIBLE_DEVICES=0,1"};

class SeveralGpusTrain : public DistTrainTest {
 protected:
  void SetUp() override {
    if (!tier::cuda_tier_built())
      GTEST_SKIP() << "this build has no CUDA device tier (it needs a CUDA LibTorch; docs/cuda.md)";
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is usable here";
    if (torch::cuda::device_count() < 2)
      GTEST_SKIP() << "these tests need two GPUs; this machine has " << torch::cuda::device_count();
    DistTrainTest::SetUp();
  }

  RunResult train_on_gpus(const std::string& config_path, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"train", config_path, "--device", "cuda", "--dist-timeout", "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_pstar(args, dir_.path(), kTwoGpus);
  }
};

TEST_F(SeveralGpusTrain, TwoRanksOnTwoGpusEachTakeTheirOwnAndTrackOneGpuRank) {
  constexpr int64_t kSteps = 6, kGlobalBatch = 4;
  std::map<int64_t, std::vector<json>> rank0;
  int64_t whole_model_data = 0, chunk_whole = 0;
  for (int64_t n : {1, 2}) {
    json c = config(kGlobalBatch / n, kSteps);
    c["engine"]["device_memory"] = "1GiB";
    c["distributed"] = {{"backend", "gloo"}};
    const std::string metrics = "metrics-" + std::to_string(n) + ".jsonl";
    const auto r = train_on_gpus(write_config(c, "gpus-" + std::to_string(n) + ".json"),
                                 {"--nproc", std::to_string(n), "--metrics", metrics});
    ASSERT_EQ(r.exit_code, 0) << r;
    rank0[n] = read_metrics(dir_.file(metrics));
    ASSERT_EQ(rank0[n].size(), static_cast<size_t>(kSteps)) << r;
    if (n == 1) {
      const ChunkPlan plan = parse_chunk_plan(r.err);
      chunk_whole = plan.chunk_size * plan.bytes_per_param;
      whole_model_data = rank0[1].back()["model_data_bytes"].get<int64_t>();
      continue;
    }
    // Each rank names its own GPU, and neither splits a budget with another.
    EXPECT_TRUE(contains(r.err, "[pstar r0] device: cuda:0 (local rank 0 of 2")) << r;
    EXPECT_TRUE(contains(r.err, "[pstar r1] device: cuda:1 (local rank 1 of 2")) << r;
    EXPECT_FALSE(contains(r.err, "per rank, 1.00 GiB for the 2 ranks on")) << r;
    for (int64_t rank = 0; rank < n; ++rank) {
      const std::string file =
          rank == 0 ? dir_.file(metrics) : dir_.file(metrics + ".rank" + std::to_string(rank));
      for (const json& m : read_metrics(file)) {
        EXPECT_NEAR(static_cast<double>(m["model_data_bytes"].get<int64_t>()),
                    static_cast<double>(whole_model_data) / n, static_cast<double>(chunk_whole))
            << "rank " << rank << ", step " << m["step"];
        EXPECT_GT(m["comm_staged_bytes"].get<int64_t>(), 0)
            << "GPU payloads travel through host blocks over gloo: " << m.dump();
      }
    }
  }
  // The bound of the shared-GPU test (train_shared_gpu_test.cpp), for the same reason.
  double largest = 0;
  for (int64_t i = 0; i < kSteps; ++i) {
    const double one = rank0[1][i]["loss"].get<double>();
    const double two = rank0[2][i]["loss"].get<double>();
    EXPECT_NEAR(two, one, 1e-5 * std::abs(one)) << "step " << i + 1;
    largest = std::max(largest, std::abs(two - one) / std::abs(one));
  }
  std::printf("two ranks on two GPUs against one: largest relative loss difference %.3g\n",
              largest);
}

// "auto" on ranks with GPUs of their own means nccl, which this build does not have: refused
// before training, naming nccl and the key that works.
TEST_F(SeveralGpusTrain, AutoBackendOnGpusOfTheirOwnNamesNccl) {
  const auto r = train_on_gpus(write_config(config(2, 2)), {"--nproc", "2"});
  EXPECT_NE(r.exit_code, 0) << r;
  for (const char* part : {"nccl", "distributed.backend \"gloo\""})
    EXPECT_TRUE(contains(r.err, part)) << "expected \"" << part << "\" in:\n" << r;
}

// Four ranks on two GPUs with distributed.share_gpus: two on each, each pair splitting its GPU's
// budget, and the run tracks one rank on one GPU.
TEST_F(SeveralGpusTrain, FourRanksShareTwoGpusTwoByTwo) {
  json c = config(1, 4);
  c["engine"]["device_memory"] = "1GiB";
  c["distributed"] = {{"share_gpus", true}};
  const auto r = train_on_gpus(write_config(c), {"--nproc", "4", "--metrics", "four.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "[pstar r2] device: cuda:0")) << r;
  EXPECT_TRUE(contains(r.err, "[pstar r3] device: cuda:1")) << r;
  EXPECT_TRUE(contains(r.err, "per rank, 1.00 GiB for the 2 ranks on cuda:0")) << r;
  json one = config(4, 4);
  one["engine"]["device_memory"] = "1GiB";
  const auto o = train_on_gpus(write_config(one, "one.json"), {"--metrics", "one.jsonl"});
  ASSERT_EQ(o.exit_code, 0) << o;
  const auto a = read_metrics(dir_.file("one.jsonl"));
  const auto b = read_metrics(dir_.file("four.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double want = a[i]["loss"].get<double>();
    EXPECT_NEAR(b[i]["loss"].get<double>(), want, 1e-5 * std::abs(want)) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace pstar::cmd
