// Several ranks of `pstar train` on a machine with several GPUs (issue 36): each local rank
// computes on a GPU of its own (local rank r on cuda:r of the visible ones) and the start-up log
// names it; over gloo (the collectives staged through host memory, Note [staged collectives]) two
// ranks on two GPUs track one GPU rank, each holding half the model data; "auto" with ranks on GPUs
// of their own is nccl, which trains them the same way in a build with the NCCL communicator and
// is refused, naming nccl, in one without. Label "multidevice", which `ctest -L gpu`
// (a regular expression) does not select: scripts/gpu-verify.sh runs these in a phase of their own
// when it finds two GPUs or more. Skipped, with the reason, without a CUDA build or with fewer
// than two GPUs.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_train_fixture.h"
#include "pstar/dist/communicator.h"

namespace pstar::cmd {
namespace {

using namespace pstar::cmd::dist_testing;  // NOLINT(build/namespaces): the shared fixture

// The first two GPUs, whatever the machine has.
class SeveralGpusTrain : public GpuTrainTest {
 protected:
  SeveralGpusTrain() : GpuTrainTest("0,1", 2) {}
};

TEST_F(SeveralGpusTrain, TwoRanksOnTwoGpusEachTakeTheirOwnAndTrackOneGpuRank) {
  const OneAndTwo runs = one_and_two_ranks({{"backend", "gloo"}}, "gpus");
  // Each rank names its own GPU, and neither splits a budget with another.
  const RunResult& r = runs.two_run;
  EXPECT_TRUE(contains(r.err, "[pstar r0] device: cuda:0 (local rank 0 of 2")) << r;
  EXPECT_TRUE(contains(r.err, "[pstar r1] device: cuda:1 (local rank 1 of 2")) << r;
  EXPECT_FALSE(contains(r.err, "per rank, 1.00 GiB for the 2 ranks on")) << r;
  // The bound of the shared-GPU test (train_shared_gpu_test.cpp), for the same reason.
  const double largest = expect_losses_track(runs.two, runs.one, 1e-5);
  std::printf("two ranks on two GPUs against one: largest relative loss difference %.3g\n",
              largest);
}

// "auto" on ranks with GPUs of their own means nccl (Note [device collectives]). With the NCCL
// communicator two ranks on two GPUs track one GPU rank with nothing staged through host memory;
// a build without it refuses before training, naming nccl and the key that works.
TEST_F(SeveralGpusTrain, AutoBackendOnGpusOfTheirOwnIsNccl) {
  if (dist::nccl_missing_reason().empty()) {
    const OneAndTwo runs = one_and_two_ranks(json::object(), "nccl", /*staged=*/false);
    EXPECT_TRUE(contains(runs.two_run.err, "collectives over nccl")) << runs.two_run;
    const double largest = expect_losses_track(runs.two, runs.one, 1e-5);
    std::printf(
        "two ranks on two GPUs over nccl against one: largest relative loss difference "
        "%.3g\n",
        largest);
    return;
  }
  const auto r = train_on_gpu(write_config(config(2, 2)), {"--nproc", "2"});
  EXPECT_NE(r.exit_code, 0) << r;
  for (const char* part : {"nccl", "distributed.backend \"gloo\""})
    EXPECT_TRUE(contains(r.err, part)) << "expected \"" << part << "\" in:\n" << r;
}

// Over NCCL a rank that is killed ends the other within its --dist-timeout (60 s) with pstar's
// distributed error, not a hang nor c10d's watchdog (Note [device collectives]): its collective's
// blocking wait gives up first.
TEST_F(SeveralGpusTrain, AKilledNcclRankStopsTheOtherWithADistributedError) {
  if (!dist::nccl_missing_reason().empty())
    GTEST_SKIP() << "this build has no NCCL communicator: " << dist::nccl_missing_reason();
  json c = config(2, 100000);
  c["engine"]["device_memory"] = "1GiB";
  const std::string cfg = write_config(c, "killed.json");
  const int port = free_port();
  Spawned r0 = spawn_gpu_rank(cfg, 0, 2, port, {"--metrics", "killed.jsonl"});
  Spawned r1 = spawn_gpu_rank(cfg, 1, 2, port, {"--metrics", "killed.jsonl"});
  // 60 s of timeout, and the start of the collective it waits in.
  const double took = kill_rank1_and_expect_rank0_to_stop(r0, r1, "killed.jsonl.rank1", 85);
  std::printf("the surviving NCCL rank stopped %.1f s after the other was killed\n", took);
}

// Four ranks on two GPUs with distributed.share_gpus: two on each, each pair splitting its GPU's
// budget, and the run tracks one rank on one GPU.
TEST_F(SeveralGpusTrain, FourRanksShareTwoGpusTwoByTwo) {
  json c = config(1, 4);
  c["engine"]["device_memory"] = "1GiB";
  c["distributed"] = {{"share_gpus", true}};
  const auto r = train_on_gpu(write_config(c), {"--nproc", "4", "--metrics", "four.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "[pstar r2] device: cuda:0")) << r;
  EXPECT_TRUE(contains(r.err, "[pstar r3] device: cuda:1")) << r;
  EXPECT_TRUE(contains(r.err, "per rank, 1.00 GiB for the 2 ranks on cuda:0")) << r;
  json one = config(4, 4);
  one["engine"]["device_memory"] = "1GiB";
  const auto o = train_on_gpu(write_config(one, "one.json"), {"--metrics", "one.jsonl"});
  ASSERT_EQ(o.exit_code, 0) << o;
  expect_losses_track(read_metrics(dir_.file("four.jsonl")), read_metrics(dir_.file("one.jsonl")),
                      1e-5);
}

}  // namespace
}  // namespace pstar::cmd
