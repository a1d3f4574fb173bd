// plan::choose_rank_device (Note [rank device]) as tables: local ranks × visible GPUs × sharing →
// each rank's device, the backend, and every ConfigError's message; the run plan's refusal of
// several GPU ranks over nccl where the build lacks it; and the budget of ranks sharing a GPU.
#include "pstar/plan/rank_device.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/formats/config.h"
#include "pstar/plan/run_plan.h"

namespace pstar::plan {
namespace {

using config::DistBackend;
using config::DistributedConfig;

constexpr const char* kNoNccl = "no NCCL in this test";

RankDeviceFacts gpu_rank(int64_t local_rank, int64_t local_world, int64_t visible,
                         const std::string& nccl_missing = "") {
  RankDeviceFacts f;
  f.requested = DeviceKind::kCuda;
  f.visible_gpus = visible;
  f.local_rank = local_rank;
  f.local_world_size = local_world;
  f.nccl_missing = nccl_missing;
  return f;
}

DistributedConfig dist(DistBackend backend, bool share) {
  DistributedConfig d;
  d.backend = backend;
  d.share_gpus = share;
  return d;
}

// The message of the ConfigError choose_rank_device throws; a test failure if it throws none.
std::string refusal(const DistributedConfig& d, const RankDeviceFacts& f) {
  try {
    const RankDevice chosen = choose_rank_device(d, f);
    ADD_FAILURE() << "expected a ConfigError, chose " << chosen.describe();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos)
        << "expected \"" << part << "\" in: " << message;
}

// Every rank of a node with 1, 2, 4 or 8 local ranks on 0, 1, 2 or 8 visible GPUs, with and without
// distributed.share_gpus: a GPU of its own (cuda:LOCAL_RANK) while there are enough, else a
// ConfigError giving both counts, or with sharing cuda:(r mod visible) over Gloo.
TEST(RankDevice, EachLocalRankTakesItsOwnGpuOrSharesWhenAllowed) {
  for (const int64_t visible : {0, 1, 2, 8}) {
    for (const int64_t local_world : {1, 2, 4, 8}) {
      for (const bool share : {false, true}) {
        std::set<int64_t> taken;
        for (int64_t r = 0; r < local_world; ++r) {
          SCOPED_TRACE(str_cat(visible, " visible, rank ", r, " of ", local_world,
                               share ? ", sharing" : ""));
          const DistributedConfig d = dist(DistBackend::kAuto, share);
          const RankDeviceFacts f = gpu_rank(r, local_world, visible);
          if (visible == 0) {
            expect_contains(refusal(d, f), {"--device cuda: this process sees no GPU",
                                            "CUDA_VISIBLE_DEVICES", "--device cpu"});
            continue;
          }
          if (local_world > visible && !share) {
            expect_contains(
                refusal(d, f),
                {str_cat("this node runs ", local_world, " ranks (LOCAL_WORLD_SIZE)"),
                 str_cat("sees ", visible, visible == 1 ? " GPU," : " GPUs,"),
                 str_cat("start at most ", visible, " rank(s) per node (--nproc ", visible, ")"),
                 "set distributed.share_gpus true", "or use --device cpu"});
            continue;
          }
          const RankDevice chosen = choose_rank_device(d, f);
          EXPECT_EQ(chosen.kind, DeviceKind::kCuda);
          const bool shared = local_world > visible;
          EXPECT_EQ(chosen.shares_gpu, shared);
          EXPECT_EQ(chosen.index, shared ? r % visible : r);
          EXPECT_EQ(chosen.name(), str_cat("cuda:", chosen.index));
          // "auto" follows the device, except that NCCL cannot join ranks on one GPU.
          EXPECT_EQ(chosen.backend, shared ? CommBackend::kGloo : CommBackend::kNccl);
          EXPECT_NE(chosen.why.find(str_cat("local rank ", r, " of ", local_world)),
                    std::string::npos)
              << chosen.why;
          EXPECT_EQ(chosen.why.find("distributed.share_gpus") != std::string::npos, shared)
              << chosen.why;
          taken.insert(chosen.index);
        }
        // Without sharing no two ranks of a node meet on a GPU; with it every visible GPU is used
        // before any is used twice.
        if (visible > 0 && (share || local_world <= visible)) {
          EXPECT_EQ(static_cast<int64_t>(taken.size()), std::min(local_world, visible));
        }
      }
    }
  }
}

// On the CPU the GPUs a machine has do not matter, nor does sharing: every rank computes on the
// CPU, and "auto" is gloo.
TEST(RankDevice, TheCpuIgnoresGpusAndSharing) {
  for (const int64_t visible : {0, 1, 8}) {
    for (const bool share : {false, true}) {
      RankDeviceFacts f = gpu_rank(3, 4, visible, kNoNccl);
      f.requested = DeviceKind::kCpu;
      const RankDevice chosen = choose_rank_device(dist(DistBackend::kAuto, share), f);
      EXPECT_EQ(chosen.kind, DeviceKind::kCpu);
      EXPECT_EQ(chosen.index, -1);
      EXPECT_FALSE(chosen.shares_gpu);
      EXPECT_EQ(chosen.backend, CommBackend::kGloo);
      EXPECT_EQ(chosen.name(), "cpu");
      EXPECT_EQ(chosen.describe(), "device: cpu, collectives over gloo");
      EXPECT_EQ(choose_rank_device(dist(DistBackend::kGloo, share), f).backend, CommBackend::kGloo);
    }
  }
}

// distributed.backend against the device, sharing and the build: what each resolves to, or the
// ConfigError naming nccl and what works.
TEST(RankDevice, BackendFollowsTheDeviceUnlessTheConfigNamesOne) {
  struct Row {
    DeviceKind device;
    bool shared;  // 2 local ranks on 1 GPU, with distributed.share_gpus
    DistBackend asked;
    bool nccl_built;
    CommBackend want;
    const char* refused;  // a part of the message, or null when it resolves
  };
  const Row rows[] = {
      {DeviceKind::kCpu, false, DistBackend::kAuto, false, CommBackend::kGloo, nullptr},
      {DeviceKind::kCpu, false, DistBackend::kGloo, false, CommBackend::kGloo, nullptr},
      {DeviceKind::kCpu, false, DistBackend::kNccl, true, CommBackend::kGloo,
       "NCCL joins GPUs, and this run computes on the CPU"},
      {DeviceKind::kCuda, false, DistBackend::kAuto, false, CommBackend::kNccl, nullptr},
      {DeviceKind::kCuda, false, DistBackend::kAuto, true, CommBackend::kNccl, nullptr},
      {DeviceKind::kCuda, false, DistBackend::kGloo, true, CommBackend::kGloo, nullptr},
      {DeviceKind::kCuda, false, DistBackend::kNccl, true, CommBackend::kNccl, nullptr},
      {DeviceKind::kCuda, false, DistBackend::kNccl, false, CommBackend::kNccl,
       "this build of pstar has no NCCL communicator (no NCCL in this test)"},
      {DeviceKind::kCuda, true, DistBackend::kAuto, true, CommBackend::kGloo, nullptr},
      {DeviceKind::kCuda, true, DistBackend::kGloo, true, CommBackend::kGloo, nullptr},
      {DeviceKind::kCuda, true, DistBackend::kNccl, true, CommBackend::kGloo,
       "2 ranks on this node share 1 GPU(s) (distributed.share_gpus), and NCCL refuses two ranks "
       "on one GPU"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(str_cat(
        row.device == DeviceKind::kCuda ? "cuda" : "cpu", row.shared ? " shared" : "", ", backend ",
        config::dist_backend_name(row.asked), row.nccl_built ? ", nccl built" : ""));
    RankDeviceFacts f = gpu_rank(1, 2, row.shared ? 1 : 2, row.nccl_built ? "" : kNoNccl);
    f.requested = row.device;
    const DistributedConfig d = dist(row.asked, row.shared);
    if (row.refused != nullptr) {
      const std::string message = refusal(d, f);
      expect_contains(message, {"distributed.backend \"nccl\"", row.refused,
                                "set distributed.backend \"gloo\" or \"auto\""});
      continue;
    }
    EXPECT_EQ(choose_rank_device(d, f).backend, row.want);
  }
  EXPECT_EQ(default_backend(DeviceKind::kCuda), CommBackend::kNccl);
  EXPECT_EQ(default_backend(DeviceKind::kCpu), CommBackend::kGloo);
  EXPECT_STREQ(comm_backend_name(CommBackend::kNccl), "nccl");
  EXPECT_STREQ(comm_backend_name(CommBackend::kGloo), "gloo");
}

TEST(RankDevice, TheLogLineNamesDeviceWhyAndBackend) {
  EXPECT_EQ(choose_rank_device(DistributedConfig(), gpu_rank(1, 2, 8)).describe(),
            "device: cuda:1 (local rank 1 of 2, 8 GPUs visible), collectives over nccl");
  EXPECT_EQ(choose_rank_device(dist(DistBackend::kAuto, true), gpu_rank(3, 4, 1)).describe(),
            "device: cuda:0 (local rank 3 of 4 sharing 1 GPU (distributed.share_gpus)), "
            "collectives over gloo");
}

// The run plan carries the rank's device; without one (pstar estimate's hypothetical hardware)
// the device is the facts' and the backend follows it.
TEST(RankDevice, TheRunPlanCarriesTheChoice) {
  RunFacts f;
  f.physical_memory_bytes = int64_t{16} << 30;
  f.free_device_bytes = int64_t{70} << 30;
  f.world_size = 2;
  f.ranks_per_host = 2;
  f.rank = choose_rank_device(DistributedConfig(), gpu_rank(1, 2, 2));
  f.device = DeviceKind::kCuda;
  f.device_name = "cuda:1";
  const RunPlan plan = resolve_run(config::TrainConfig(), f);
  EXPECT_EQ(plan.device_name, "cuda:1");
  EXPECT_EQ(plan.rank.index, 1);
  EXPECT_EQ(plan.rank.backend, CommBackend::kNccl);

  RunFacts hypothetical = f;
  hypothetical.rank.reset();
  hypothetical.device_name = "A100-80GB";
  const RunPlan estimated = resolve_run(config::TrainConfig(), hypothetical);
  EXPECT_EQ(estimated.rank.kind, DeviceKind::kCuda);
  EXPECT_EQ(estimated.rank.backend, CommBackend::kNccl);
  hypothetical.device = DeviceKind::kCpu;
  hypothetical.device_name = "cpu";
  EXPECT_EQ(resolve_run(config::TrainConfig(), hypothetical).rank.backend, CommBackend::kGloo);
}

// Several ranks on GPUs train over gloo (Note [staged collectives]); over nccl, which this build
// lacks, they are refused with a message that says what is missing and what works. One GPU rank,
// and CPU ranks, run whatever the build.
TEST(RankDevice, SeveralGpuRanksTrainOverGlooUntilTheBuildHasNccl) {
  RunFacts f;
  f.physical_memory_bytes = int64_t{16} << 30;
  f.free_device_bytes = int64_t{70} << 30;
  f.device = DeviceKind::kCuda;
  f.world_size = 2;
  f.ranks_per_host = 2;
  struct Row {
    bool share;
    DistBackend asked;
    bool refused;
  };
  for (const Row row :
       {Row{false, DistBackend::kAuto, true}, Row{false, DistBackend::kGloo, false},
        Row{true, DistBackend::kAuto, false}, Row{true, DistBackend::kGloo, false}}) {
    SCOPED_TRACE(str_cat(row.share ? "sharing one GPU" : "a GPU each", ", backend ",
                         config::dist_backend_name(row.asked)));
    config::TrainConfig c;
    c.distributed = dist(row.asked, row.share);
    f.rank = choose_rank_device(c.distributed, gpu_rank(1, 2, row.share ? 1 : 2));
    f.device_name = f.rank->name();
    const RunPlan plan = resolve_run(c, f);
    EXPECT_NO_THROW(check_rank_collectives(plan, "")) << "a build with NCCL runs every row";
    if (!row.refused) {
      EXPECT_NO_THROW(check_rank_collectives(plan, kNoNccl));
      continue;
    }
    try {
      check_rank_collectives(plan, kNoNccl);
      ADD_FAILURE() << "two GPU ranks over nccl were let through without NCCL";
    } catch (const ConfigError& e) {
      expect_contains(e.what(),
                      {"training 2 ranks on GPUs (this one on cuda:1) over nccl",
                       "(distributed.backend \"auto\")", "no NCCL communicator (", kNoNccl,
                       "set distributed.backend \"gloo\"", "--nproc 1", "--device cpu"});
    }
  }
  f.world_size = 1;
  f.ranks_per_host = 1;
  f.rank = choose_rank_device(DistributedConfig(), gpu_rank(0, 1, 1));
  f.device_name = "cuda:0";
  EXPECT_NO_THROW(check_rank_collectives(resolve_run(config::TrainConfig(), f), kNoNccl));

  RunFacts cpu;
  cpu.physical_memory_bytes = int64_t{16} << 30;
  cpu.world_size = 4;
  cpu.ranks_per_host = 4;
  RankDeviceFacts rf = gpu_rank(2, 4, 0);
  rf.requested = DeviceKind::kCpu;
  cpu.rank = choose_rank_device(DistributedConfig(), rf);
  EXPECT_NO_THROW(check_rank_collectives(resolve_run(config::TrainConfig(), cpu), kNoNccl));
}

// Ranks sharing a GPU share its budget as a node's ranks share its host memory: each of the GPU's
// ranks gets an equal part of engine.device_memory (or of its default). gpu_ranks counts the local
// ranks that land on each GPU: 5 ranks on 2 GPUs put 3 on cuda:0 and 2 on cuda:1.
TEST(RankDevice, RanksSharingAGpuShareItsBudget) {
  struct Row {
    int64_t local_rank, local_world, visible, gpu_ranks;
  };
  for (const Row row : {Row{0, 1, 1, 1}, Row{1, 2, 2, 1}, Row{1, 2, 1, 2}, Row{3, 4, 1, 4},
                        Row{0, 5, 2, 3}, Row{4, 5, 2, 3}, Row{1, 5, 2, 2}, Row{3, 5, 2, 2}}) {
    SCOPED_TRACE(str_cat("local rank ", row.local_rank, " of ", row.local_world, " on ",
                         row.visible, " GPUs"));
    const RankDevice d = choose_rank_device(dist(DistBackend::kAuto, true),
                                            gpu_rank(row.local_rank, row.local_world, row.visible));
    EXPECT_EQ(d.gpu_ranks, row.gpu_ranks);
    RunFacts f;
    f.physical_memory_bytes = int64_t{16} << 30;
    f.free_device_bytes = int64_t{60} << 30;
    f.device = DeviceKind::kCuda;
    f.world_size = row.local_world;
    f.ranks_per_host = row.local_world;
    f.rank = d;
    f.device_name = d.name();
    config::TrainConfig c;
    const RunPlan by_default = resolve_run(c, f);
    const auto whole = static_cast<int64_t>(kCudaFreeMemoryRatio * static_cast<double>(60LL << 30));
    EXPECT_EQ(by_default.budgets.device, whole) << "the config keeps the GPU's budget";
    EXPECT_EQ(by_default.device_budget_per_rank, whole / row.gpu_ranks);
    if (row.gpu_ranks > 1) {
      std::string decisions;
      for (const std::string& line : by_default.decisions) decisions += line + "\n";
      expect_contains(decisions,
                      {str_cat("shared by the ", row.gpu_ranks, " ranks computing on it")});
    }
    c.engine.device_memory = int64_t{12} << 30;
    EXPECT_EQ(resolve_run(c, f).device_budget_per_rank, (int64_t{12} << 30) / row.gpu_ranks);
  }
  // The CPU's emulated tier: every rank has the whole budget.
  RunFacts cpu;
  cpu.physical_memory_bytes = int64_t{16} << 30;
  cpu.world_size = 2;
  cpu.ranks_per_host = 2;
  config::TrainConfig c;
  c.engine.device_memory = int64_t{1} << 30;
  EXPECT_EQ(resolve_run(c, cpu).device_budget_per_rank, int64_t{1} << 30);
}

}  // namespace
}  // namespace pstar::plan
