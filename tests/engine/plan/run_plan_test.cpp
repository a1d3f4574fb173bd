// plan::resolve_run as a table: configs × facts → the decisions of Note [run plan].
#include "pstar/plan/run_plan.h"

#include <string>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"

namespace pstar::plan {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

RunFacts cpu_facts(int64_t world = 1, int64_t per_host = 1) {
  RunFacts f;
  f.world_size = world;
  f.ranks_per_host = per_host;
  f.physical_memory_bytes = 20 * kGiB;
  return f;
}

RunFacts gpu_facts() {
  RunFacts f = cpu_facts();
  f.device = DeviceKind::kCuda;
  f.device_name = "cuda:0";
  f.free_device_bytes = 70 * kGiB;
  return f;
}

bool mentions(const RunPlan& plan, const std::string& text) {
  for (const std::string& line : plan.decisions)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

TEST(RunPlan, TrainBatchSizeCountsEveryRank) {
  config::TrainConfig c;
  c.train_micro_batch_size_per_gpu = 2;
  c.gradient_accumulation_steps = 1;
  c.train_batch_size = 4;  // DeepSpeed's: micro × accumulation × world
  const RunPlan two = resolve_run(c, cpu_facts(2, 2));
  EXPECT_EQ(two.global_batch, 4);
  EXPECT_EQ(two.world_size, 2);
  try {
    resolve_run(c, cpu_facts());
    FAIL() << "train_batch_size 4 accepted on one rank with micro-batch 2";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("world size (1) = 2, found 4"), std::string::npos) << what;
  }
  c.train_batch_size = 2;  // right for one rank, wrong for two
  EXPECT_EQ(resolve_run(c, cpu_facts()).global_batch, 2);
  try {
    resolve_run(c, cpu_facts(2, 2));
    FAIL() << "train_batch_size 2 accepted on two ranks";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train_micro_batch_size_per_gpu (2) * gradient_accumulation_steps (1) * "
                        "world size (2) = 4, found 2"),
              std::string::npos)
        << what;
  }
  c.train_batch_size.reset();
  c.gradient_accumulation_steps = 3;
  EXPECT_EQ(resolve_run(c, cpu_facts(4, 2)).global_batch, 2 * 3 * 4);
  // A product past int64 is refused, not wrapped.
  c.train_micro_batch_size_per_gpu = int64_t{1} << 62;
  c.train_batch_size = 16;
  EXPECT_THROW(resolve_run(c, cpu_facts(4, 4)), ConfigError);
}

TEST(RunPlan, Bf16AutoFollowsTheFactsAndSaysWhy) {
  config::TrainConfig c;
  c.bf16.auto_select = true;
  RunFacts f = cpu_facts();
  f.bf16_fast = true;
  f.bf16_evidence = "bf16 matmul 700 GFLOP/s";
  RunPlan p = resolve_run(c, f);
  EXPECT_EQ(p.precision, Precision::kBf16);
  EXPECT_TRUE(p.config.bf16.enabled);
  EXPECT_FALSE(p.config.bf16.auto_select);
  EXPECT_EQ(p.compute_elem_bytes(), 2);
  EXPECT_TRUE(mentions(p, "precision: bf16 (bf16.enabled \"auto\" on cpu: bf16 matmul 700"));
  f.bf16_fast = false;
  p = resolve_run(c, f);
  EXPECT_EQ(p.precision, Precision::kFp32);
  EXPECT_FALSE(p.config.bf16.enabled);
  EXPECT_EQ(p.compute_elem_bytes(), 4);
  // Asking "auto" without the probe's verdict is a bug in the caller.
  f.bf16_fast.reset();
  EXPECT_THROW(resolve_run(c, f), InternalError);
  // Explicit choices need no probe and make no decision line.
  c.bf16 = {false, false};
  c.fp16.enabled = true;
  p = resolve_run(c, cpu_facts());
  EXPECT_EQ(p.precision, Precision::kFp16);
  EXPECT_TRUE(p.decisions.empty());
}

TEST(RunPlan, BudgetsComeFromTheConfigOrTheMachine) {
  config::TrainConfig c;
  RunPlan p = resolve_run(c, cpu_facts(2, 2));
  const auto share = static_cast<int64_t>(kDefaultMemoryRatio * static_cast<double>(20 * kGiB));
  EXPECT_EQ(p.budgets.device, share);
  EXPECT_EQ(p.budgets.host, share);
  EXPECT_EQ(p.host_budget_per_rank, share / 2) << "two ranks on a host share its budget";
  EXPECT_FALSE(p.config.engine.device_memory.has_value()) << "CPU defaults stay defaults";

  // On a GPU, engine.device_memory defaults to a share of the free memory, kept in the config.
  p = resolve_run(c, gpu_facts());
  const auto gpu_share =
      static_cast<int64_t>(kCudaFreeMemoryRatio * static_cast<double>(70 * kGiB));
  EXPECT_EQ(p.budgets.device, gpu_share);
  EXPECT_EQ(p.config.engine.device_memory, gpu_share);
  EXPECT_TRUE(mentions(p, "of the free memory of cuda:0"));
  // Without the free memory, that default cannot be made.
  RunFacts no_free = gpu_facts();
  no_free.free_device_bytes.reset();
  EXPECT_THROW(resolve_run(c, no_free), InternalError);
  // A budget given is kept as given, and needs no free-memory fact.
  c.engine.device_memory = 8 * kGiB;
  c.engine.host_memory = 64 * kGiB;
  p = resolve_run(c, no_free);
  EXPECT_EQ(p.budgets.device, 8 * kGiB);
  EXPECT_EQ(p.budgets.host, 64 * kGiB);
  EXPECT_TRUE(p.decisions.empty());
  // The torch engine has no device tier: nothing is decided for one.
  c.engine.device_memory.reset();
  c.engine.mode = config::EngineMode::kTorch;
  p = resolve_run(c, no_free);
  EXPECT_FALSE(p.chunked);
  EXPECT_FALSE(p.config.engine.device_memory.has_value());
}

TEST(RunPlan, OverlapAdamAutoIsOnForAGpuOnly) {
  config::TrainConfig c;
  ASSERT_TRUE(c.engine.overlap_adam_auto);
  EXPECT_FALSE(resolve_run(c, cpu_facts()).overlap_adam);
  const RunPlan gpu = resolve_run(c, gpu_facts());
  EXPECT_TRUE(gpu.overlap_adam);
  EXPECT_TRUE(gpu.config.engine.overlap_adam);
  EXPECT_FALSE(gpu.config.engine.overlap_adam_auto) << "decided: a second resolve agrees";
  EXPECT_TRUE(resolve_run(gpu.config, cpu_facts()).overlap_adam);
  c.engine.overlap_adam_auto = false;
  c.engine.overlap_adam = true;
  EXPECT_TRUE(resolve_run(c, cpu_facts()).overlap_adam);
  c.engine.overlap_adam = false;
  EXPECT_FALSE(resolve_run(c, gpu_facts()).overlap_adam);
  c.engine.prefetch = false;
  EXPECT_FALSE(resolve_run(c, gpu_facts()).prefetch);
}

TEST(RunPlan, SeveralRanksNeedTheChunkEngine) {
  config::TrainConfig c;
  c.engine.mode = config::EngineMode::kTorch;
  EXPECT_FALSE(resolve_run(c, cpu_facts()).chunked);
  try {
    resolve_run(c, cpu_facts(2, 2));
    FAIL() << "the torch engine was planned on two ranks";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("use engine.mode \"chunked\""), std::string::npos);
  }
}

// Resolving is idempotent: a plan's config resolves to the same plan with no new decisions, which
// is what lets the Trainer resolve a config `pstar train` resolved already.
TEST(RunPlan, APlansConfigResolvesToItself) {
  config::TrainConfig c;
  c.bf16.auto_select = true;
  RunFacts f = gpu_facts();
  f.bf16_fast = true;
  const RunPlan first = resolve_run(c, f);
  RunFacts bare = gpu_facts();
  bare.free_device_bytes.reset();  // a resolved config needs neither fact
  const RunPlan again = resolve_run(first.config, bare);
  EXPECT_TRUE(again.decisions.empty());
  EXPECT_EQ(again.precision, first.precision);
  EXPECT_EQ(again.budgets.device, first.budgets.device);
  EXPECT_EQ(again.overlap_adam, first.overlap_adam);
  EXPECT_EQ(config::to_json_text(again.config), config::to_json_text(first.config));
}

}  // namespace
}  // namespace pstar::plan
