// plan::resolve_run as a table: configs × facts → the decisions of Note [run plan].
#include "pstar/plan/run_plan.h"

#include <algorithm>
#include <optional>
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

// bf16.enabled × fp16.enabled × the probe's verdict → the precision, the config's decided value,
// and whether the plan says why.
TEST(RunPlan, PrecisionTable) {
  using config::OnOffAuto;
  struct Row {
    OnOffAuto bf16;
    bool fp16;
    std::optional<bool> bf16_fast;  // the fact; unset: no probe ran
    DeviceKind device;
    Precision precision;
    OnOffAuto decided;
    const char* decision;  // a line the plan logs, or null for none
  };
  const Row rows[] = {
      {OnOffAuto::kAuto, false, true, DeviceKind::kCpu, Precision::kBf16, OnOffAuto::kOn,
       "precision: bf16 (bf16.enabled \"auto\" on cpu: probe says so)"},
      {OnOffAuto::kAuto, false, false, DeviceKind::kCpu, Precision::kFp32, OnOffAuto::kOff,
       "precision: fp32 (bf16.enabled \"auto\" on cpu: probe says so)"},
      {OnOffAuto::kAuto, false, true, DeviceKind::kCuda, Precision::kBf16, OnOffAuto::kOn,
       "precision: bf16 (bf16.enabled \"auto\" on cuda:0: probe says so)"},
      // Explicit choices need no probe, ignore its verdict and make no decision line.
      {OnOffAuto::kOn, false, false, DeviceKind::kCpu, Precision::kBf16, OnOffAuto::kOn, nullptr},
      {OnOffAuto::kOn, false, std::nullopt, DeviceKind::kCuda, Precision::kBf16, OnOffAuto::kOn,
       nullptr},
      {OnOffAuto::kOff, false, true, DeviceKind::kCpu, Precision::kFp32, OnOffAuto::kOff, nullptr},
      {OnOffAuto::kOff, true, std::nullopt, DeviceKind::kCpu, Precision::kFp16, OnOffAuto::kOff,
       nullptr},
      {OnOffAuto::kOff, true, true, DeviceKind::kCuda, Precision::kFp16, OnOffAuto::kOff, nullptr},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(str_cat("bf16.enabled ", config::on_off_auto_name(row.bf16), ", fp16 ", row.fp16,
                         ", fast ", row.bf16_fast ? (*row.bf16_fast ? "yes" : "no") : "unknown",
                         ", ", row.device == DeviceKind::kCuda ? "cuda" : "cpu"));
    config::TrainConfig c;
    c.bf16.enabled = row.bf16;
    c.fp16.enabled = row.fp16;
    RunFacts f = row.device == DeviceKind::kCuda ? gpu_facts() : cpu_facts();
    f.bf16_fast = row.bf16_fast;
    f.bf16_evidence = "probe says so";
    const RunPlan p = resolve_run(c, f);
    EXPECT_EQ(p.precision, row.precision);
    EXPECT_EQ(p.config.bf16.enabled, row.decided);
    EXPECT_EQ(p.compute_elem_bytes(), row.precision == Precision::kFp32 ? 4 : 2);
    EXPECT_EQ(decided_precision(p.config), p.precision) << "the plan's config agrees with it";
    if (row.decision != nullptr) {
      EXPECT_TRUE(mentions(p, row.decision)) << (p.decisions.empty() ? "" : p.decisions[0]);
    } else {
      EXPECT_FALSE(mentions(p, "precision:")) << "an explicit choice is not a decision";
    }
  }
  // Asking "auto" without the probe's verdict is a bug in the caller.
  config::TrainConfig c;
  c.bf16.enabled = OnOffAuto::kAuto;
  EXPECT_THROW(resolve_run(c, cpu_facts()), InternalError);
}

// Only the plan decides "auto": reading a precision off an undecided config is refused.
TEST(RunPlan, DecidedPrecisionRefusesAuto) {
  config::TrainConfig c;
  c.bf16.enabled = config::OnOffAuto::kAuto;
  try {
    decided_precision(c);
    FAIL() << "a precision was read off bf16.enabled \"auto\"";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16.enabled \"auto\" is decided for a compute device"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(elem_bytes(Precision::kFp32), 4);
  EXPECT_EQ(elem_bytes(Precision::kBf16), 2);
  EXPECT_EQ(elem_bytes(Precision::kFp16), 2);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
    EXPECT_EQ(precision_from_name(precision_name(p)), p);
  EXPECT_FALSE(precision_from_name("fp8").has_value());
}

TEST(RunPlan, BudgetsComeFromTheConfigOrTheMachine) {
  config::TrainConfig c;
  c.use_cpu_embedding = config::OnOffAuto::kOff;  // decided: only the budgets are at stake here
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

// engine.overlap_adam × the device × the engine → the plan's decision and the config's decided
// value; "auto" is on for a GPU only.
TEST(RunPlan, OverlapAdamTable) {
  using config::OnOffAuto;
  ASSERT_EQ(config::TrainConfig().engine.overlap_adam, OnOffAuto::kAuto) << "the default";
  struct Row {
    OnOffAuto setting;
    DeviceKind device;
    bool chunked;
    bool overlap;       // RunPlan::overlap_adam
    OnOffAuto decided;  // the plan's config
  };
  const Row rows[] = {
      {OnOffAuto::kAuto, DeviceKind::kCpu, true, false, OnOffAuto::kOff},
      {OnOffAuto::kAuto, DeviceKind::kCuda, true, true, OnOffAuto::kOn},
      {OnOffAuto::kOn, DeviceKind::kCpu, true, true, OnOffAuto::kOn},
      {OnOffAuto::kOn, DeviceKind::kCuda, true, true, OnOffAuto::kOn},
      {OnOffAuto::kOff, DeviceKind::kCpu, true, false, OnOffAuto::kOff},
      {OnOffAuto::kOff, DeviceKind::kCuda, true, false, OnOffAuto::kOff},
      // The torch engine has no host Adam to overlap, whatever the setting says.
      {OnOffAuto::kOn, DeviceKind::kCpu, false, false, OnOffAuto::kOn},
      {OnOffAuto::kAuto, DeviceKind::kCuda, false, false, OnOffAuto::kOn},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(str_cat("engine.overlap_adam ", config::on_off_auto_name(row.setting), ", ",
                         row.device == DeviceKind::kCuda ? "cuda" : "cpu", ", ",
                         row.chunked ? "chunked" : "torch"));
    config::TrainConfig c;
    c.engine.overlap_adam = row.setting;
    c.engine.mode = row.chunked ? config::EngineMode::kChunked : config::EngineMode::kTorch;
    const RunPlan p = resolve_run(c, row.device == DeviceKind::kCuda ? gpu_facts() : cpu_facts());
    EXPECT_EQ(p.overlap_adam, row.overlap);
    EXPECT_EQ(p.config.engine.overlap_adam, row.decided);
    EXPECT_EQ(overlap_adam_on(row.setting, row.device), row.decided == OnOffAuto::kOn);
    // Decided: a second resolve on another device agrees.
    const DeviceKind other = row.device == DeviceKind::kCuda ? DeviceKind::kCpu : DeviceKind::kCuda;
    EXPECT_EQ(
        resolve_run(p.config, other == DeviceKind::kCuda ? gpu_facts() : cpu_facts()).overlap_adam,
        row.overlap);
  }
  config::TrainConfig c;
  c.engine.prefetch = false;
  EXPECT_FALSE(resolve_run(c, gpu_facts()).prefetch);
}

// engine.speculative_adam (Note [speculative adam]) × overlap × clipping: true speculates every
// clipping step and needs the worker; "auto" only with the worker and where the update waits for
// the norm (clipping or fp16), after calm steps; a resolved config resolves to the same rule.
TEST(RunPlan, SpeculativeAdamTable) {
  using config::OnOffAuto;
  using Spec = RunPlan::Speculation;
  ASSERT_EQ(config::TrainConfig().engine.speculative_adam, OnOffAuto::kAuto) << "the default";
  struct Row {
    OnOffAuto setting;
    bool gpu;
    double clip;
    Spec want;
  };
  const Row rows[] = {
      {OnOffAuto::kAuto, true, 1.0, Spec::kByCost},
      {OnOffAuto::kAuto, true, 0.0, Spec::kOff},   // nothing waits for the norm
      {OnOffAuto::kAuto, false, 1.0, Spec::kOff},  // no worker on the emulated tier's "auto"
      {OnOffAuto::kOn, true, 1.0, Spec::kAlways},
      {OnOffAuto::kOff, true, 1.0, Spec::kOff},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(str_cat(config::on_off_auto_name(row.setting), row.gpu ? ", cuda" : ", cpu",
                         ", clip ", row.clip));
    config::TrainConfig c;
    c.engine.speculative_adam = row.setting;
    c.gradient_clipping = row.clip;
    const RunPlan p = resolve_run(c, row.gpu ? gpu_facts() : cpu_facts());
    EXPECT_EQ(p.speculation, row.want);
    EXPECT_EQ(resolve_run(p.config, row.gpu ? gpu_facts() : cpu_facts()).speculation, row.want);
  }
  config::TrainConfig c;
  c.engine.speculative_adam = OnOffAuto::kOn;
  c.gradient_clipping = 1.0;
  try {
    resolve_run(c, cpu_facts());  // overlap_adam "auto" is off on the emulated tier
    FAIL() << "speculation without the worker was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set engine.overlap_adam true"), std::string::npos)
        << e.what();
  }
  c.engine.overlap_adam = OnOffAuto::kOn;
  EXPECT_EQ(resolve_run(c, cpu_facts()).speculation, Spec::kAlways);
}

// use_cpu_embedding × the device → the config's decided value (Note [cpu embedding]): "auto" is
// off for a GPU and on for the emulated tier; a decided config resolves to itself anywhere, and
// only a decided one says where the embedding lives.
TEST(RunPlan, CpuEmbeddingTable) {
  using config::OnOffAuto;
  ASSERT_EQ(config::TrainConfig().use_cpu_embedding, OnOffAuto::kAuto) << "the default";
  struct Row {
    OnOffAuto setting;
    DeviceKind device;
    OnOffAuto decided;
  };
  const Row rows[] = {
      {OnOffAuto::kAuto, DeviceKind::kCpu, OnOffAuto::kOn},
      {OnOffAuto::kAuto, DeviceKind::kCuda, OnOffAuto::kOff},
      {OnOffAuto::kOn, DeviceKind::kCpu, OnOffAuto::kOn},
      {OnOffAuto::kOn, DeviceKind::kCuda, OnOffAuto::kOn},
      {OnOffAuto::kOff, DeviceKind::kCpu, OnOffAuto::kOff},
      {OnOffAuto::kOff, DeviceKind::kCuda, OnOffAuto::kOff},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(str_cat("use_cpu_embedding ", config::on_off_auto_name(row.setting), ", ",
                         row.device == DeviceKind::kCuda ? "cuda" : "cpu"));
    config::TrainConfig c;
    c.use_cpu_embedding = row.setting;
    const RunPlan p = resolve_run(c, row.device == DeviceKind::kCuda ? gpu_facts() : cpu_facts());
    EXPECT_EQ(p.config.use_cpu_embedding, row.decided);
    EXPECT_EQ(cpu_embedding_on(row.setting, row.device), row.decided == OnOffAuto::kOn);
    EXPECT_EQ(decided_cpu_embedding(p.config), row.decided == OnOffAuto::kOn);
    const bool said = std::any_of(p.decisions.begin(), p.decisions.end(), [](const auto& d) {
      return d.find("use_cpu_embedding") != std::string::npos;
    });
    EXPECT_EQ(said, row.setting == OnOffAuto::kAuto && row.device == DeviceKind::kCuda);
    const DeviceKind other = row.device == DeviceKind::kCuda ? DeviceKind::kCpu : DeviceKind::kCuda;
    EXPECT_EQ(resolve_run(p.config, other == DeviceKind::kCuda ? gpu_facts() : cpu_facts())
                  .config.use_cpu_embedding,
              row.decided);
  }
  // The reason names the cause: the tied head, or for an untied one the host's work on the table.
  const auto reason = [](bool tied) {
    RunFacts f = gpu_facts();
    f.tied_head = tied;
    for (const std::string& d : resolve_run(config::TrainConfig(), f).decisions)
      if (d.find("use_cpu_embedding") != std::string::npos) return d;
    return std::string();
  };
  EXPECT_NE(reason(true).find("the tied LM head needs the table on the GPU"), std::string::npos)
      << reason(true);
  EXPECT_EQ(reason(false).find("tied LM head needs"), std::string::npos) << reason(false);
  EXPECT_NE(reason(false).find("the host would write its whole gradient in every backward"),
            std::string::npos)
      << reason(false);
  EXPECT_NE(reason(false).find("the LM head is untied"), std::string::npos) << reason(false);
  EXPECT_THROW(
      {
        try {
          decided_cpu_embedding(config::TrainConfig());
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("only a run decides it"), std::string::npos);
          throw;
        }
      },
      ConfigError);
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
  c.bf16.enabled = config::OnOffAuto::kAuto;
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
