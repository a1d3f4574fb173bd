#include "pstar/plan/run_plan.h"

#include <limits>

#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::plan {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

std::optional<Precision> precision_from_name(const std::string& name) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
    if (name == precision_name(p)) return p;
  return std::nullopt;
}

int64_t elem_bytes(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return 4;
    case Precision::kBf16:
    case Precision::kFp16:
      return 2;
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown precision ", static_cast<int>(precision));
}

Precision decided_precision(const config::TrainConfig& config) {
  switch (config.bf16.enabled) {
    case config::OnOffAuto::kAuto:
      PSTAR_THROW(ConfigError,
                  "bf16.enabled \"auto\" is decided for a compute device: resolve the config's "
                  "run plan (plan::resolve_run, or train::plan_run) before building the engine");
    case config::OnOffAuto::kOn:
      return Precision::kBf16;
    case config::OnOffAuto::kOff:
      return config.fp16.enabled ? Precision::kFp16 : Precision::kFp32;
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown bf16.enabled ", static_cast<int>(config.bf16.enabled));
}

namespace {

// DeepSpeed's train_batch_size is the global batch, so it can only be checked once the world size
// is known: here, not when the config is read.
void check_global_batch(const config::TrainConfig& c, int64_t world) {
  if (!c.train_batch_size) return;
  const int64_t micro = c.train_micro_batch_size_per_gpu;
  const int64_t accumulation = c.gradient_accumulation_steps;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const bool overflows = micro > kMax / accumulation || micro * accumulation > kMax / world;
  const std::string product =
      overflows ? "more than 2^63" : std::to_string(micro * accumulation * world);
  PSTAR_CHECK(!overflows && micro * accumulation * world == *c.train_batch_size, ConfigError,
              c.source.empty() ? std::string() : c.source + ": ",
              "train_batch_size: expected train_micro_batch_size_per_gpu (", micro,
              ") * gradient_accumulation_steps (", accumulation, ") * world size (", world,
              ") = ", product, ", found ", *c.train_batch_size,
              "; set train_batch_size to that product or leave it out");
}

// A true/false/"auto" setting, with what "auto" means where the run is.
bool decide(config::OnOffAuto setting, bool when_auto) {
  return setting == config::OnOffAuto::kAuto ? when_auto : setting == config::OnOffAuto::kOn;
}

}  // namespace

bool overlap_adam_on(config::OnOffAuto overlap_adam, DeviceKind device) {
  return decide(overlap_adam, /*when_auto=*/device == DeviceKind::kCuda);
}

// Note [cpu embedding]
// ~~~~~~~~~~~~~~~~~~~~
// PatrickStar keeps the token embedding on the host (use_cpu_embedding): the lookup is cheap
// there and the table stays out of GPU memory. A GPT's LM head is tied to that table, though, so
// every forward copies the whole table to the GPU for the head's product and every backward copies
// its gradient back, and the host then runs the lookup's backward over the whole table. On the
// H200 at 1.31B (2026-11-27, PSTAR_TORCH_TRACE, Note [torch trace]) that was 244 MB each way per
// step through pageable memory (the device-to-host side at 1.4 GB/s) and a 70 ms gap in the GPU's
// work during the lookup's backward: 0.51 s per step against 0.26 s for the same model in
// LibTorch alone, and 0.43 of plain PyTorch's throughput. With the table in an ordinary chunk,
// which moves like any other, the same run reached 0.98 of plain PyTorch. So "auto" is off on a
// GPU. An untied head (Llama-3, Qwen2) does not read the table, but a table on the host still makes
// the host write a gradient the size of the whole table in every backward (the lookup's backward
// runs where the table is) and run the table's Adam, while the GPU waits for the lookup's
// backward: "auto" is off on a GPU for those too, and the log names that cause, not the tied head.
// On the emulated tier host and "device" are the same memory, and keeping the table out of
// the emulated budget leaves it to the chunks that the tests make move: "auto" is on there.
bool cpu_embedding_on(config::OnOffAuto use_cpu_embedding, DeviceKind device) {
  return decide(use_cpu_embedding, /*when_auto=*/device != DeviceKind::kCuda);
}

bool decided_cpu_embedding(const config::TrainConfig& config) {
  PSTAR_CHECK(config.use_cpu_embedding != config::OnOffAuto::kAuto, ConfigError,
              "use_cpu_embedding is \"auto\" in this config, and only a run decides it (off on a "
              "GPU, on the emulated tier); the chunk layout depends on it, so give true or false: "
              "what the run that uses this layout will have");
  return config.use_cpu_embedding == config::OnOffAuto::kOn;
}

RunPlan resolve_run(const config::TrainConfig& config, const RunFacts& facts) {
  PSTAR_INTERNAL_ASSERT(facts.world_size >= 1 && facts.ranks_per_host >= 1 &&
                            facts.ranks_per_host <= facts.world_size,
                        "world size ", facts.world_size, ", ", facts.ranks_per_host, " per host");
  RunPlan plan;
  plan.config = config;
  config::TrainConfig& c = plan.config;
  plan.chunked = c.engine.mode == config::EngineMode::kChunked;
  plan.device = facts.device;
  plan.device_name = facts.device_name;
  plan.world_size = facts.world_size;
  plan.ranks_per_host = facts.ranks_per_host;
  if (facts.rank) {
    PSTAR_INTERNAL_ASSERT(
        facts.rank->kind == facts.device && facts.rank->name() == facts.device_name,
        "the rank's device ", facts.rank->name(), " is not the facts' ", facts.device_name);
    plan.rank = *facts.rank;
  } else {
    plan.rank.kind = facts.device;
    plan.rank.index = facts.device == DeviceKind::kCuda ? 0 : -1;
    plan.rank.backend = default_backend(facts.device);
  }

  PSTAR_CHECK(plan.world_size == 1 || plan.chunked, ConfigError, "engine.mode \"",
              config::engine_mode_name(c.engine.mode),
              "\" trains on one rank; use engine.mode \"chunked\" to train on ", plan.world_size,
              " ranks");
  check_global_batch(c, plan.world_size);
  plan.micro_batch = c.train_micro_batch_size_per_gpu;
  plan.accumulation = c.gradient_accumulation_steps;
  plan.global_batch = plan.micro_batch * plan.accumulation * plan.world_size;

  // Precision: "auto" is bf16 where the device runs it fast and accurately (Note [bf16 on CPUs]).
  if (c.bf16.enabled == config::OnOffAuto::kAuto) {
    PSTAR_INTERNAL_ASSERT(facts.bf16_fast.has_value(),
                          "bf16.enabled \"auto\" needs the bf16 probe's verdict");
    c.bf16.enabled = config::on_off(*facts.bf16_fast);
    plan.decisions.push_back(str_cat("precision: ", *facts.bf16_fast ? "bf16" : "fp32",
                                     " (bf16.enabled \"auto\" on ", facts.device_name, ": ",
                                     facts.bf16_evidence, ")"));
  }
  plan.precision = decided_precision(c);

  // Budgets. On a GPU engine.device_memory's default is a share of the device's free memory; the
  // config keeps it, so that every later reader (and the checkpoint's config.json) sees the same.
  if (plan.chunked && plan.device == DeviceKind::kCuda && !c.engine.device_memory) {
    PSTAR_INTERNAL_ASSERT(facts.free_device_bytes.has_value(),
                          "the CUDA budget's default needs the device's free memory");
    c.engine.device_memory =
        static_cast<int64_t>(kCudaFreeMemoryRatio * static_cast<double>(*facts.free_device_bytes));
    plan.decisions.push_back(str_cat(
        "engine.device_memory: ", format_bytes(*c.engine.device_memory), " (",
        static_cast<int>(kCudaFreeMemoryRatio * 100), "% of the free memory of ", facts.device_name,
        plan.rank.gpu_ranks > 1
            ? str_cat(", shared by the ", plan.rank.gpu_ranks, " ranks computing on it")
            : std::string(),
        ")"));
  }
  plan.budgets = budgets_for(c, facts.physical_memory_bytes);
  plan.host_budget_per_rank = plan.budgets.host / plan.ranks_per_host;
  plan.device_budget_per_rank = plan.device == DeviceKind::kCuda
                                    ? plan.budgets.device / plan.rank.gpu_ranks
                                    : plan.budgets.device;

  const bool overlap = overlap_adam_on(c.engine.overlap_adam, plan.device);
  c.engine.overlap_adam = config::on_off(overlap);
  plan.overlap_adam = plan.chunked && overlap;
  // Note [speculative adam]: speculation runs on the host Adam worker; it matters only where the
  // update waits for the gradient norm (clipping, fp16's overflow check).
  PSTAR_CHECK(c.engine.speculative_adam != config::OnOffAuto::kOn || plan.overlap_adam, ConfigError,
              "engine.speculative_adam is true but host Adam has no worker to run in the backward "
              "on (engine.overlap_adam is off",
              plan.chunked ? "" : ", and engine.mode \"torch\" has none",
              "); set "
              "engine.overlap_adam true or engine.speculative_adam \"auto\"");
  const bool waits_for_norm = c.gradient_clipping > 0 || c.fp16.enabled;
  if (c.engine.speculative_adam == config::OnOffAuto::kOn) {
    plan.speculation = RunPlan::Speculation::kAlways;
  } else if (c.engine.speculative_adam == config::OnOffAuto::kAuto && plan.overlap_adam &&
             waits_for_norm) {
    plan.speculation = RunPlan::Speculation::kByCost;
  }
  // speculative_adam stays as given: "auto" is decided during the run, from what its steps measure
  // on this machine (Note [speculation by cost]), not here; the plan says only which rule applies.
  const bool cpu_embedding = cpu_embedding_on(c.use_cpu_embedding, plan.device);
  if (c.use_cpu_embedding == config::OnOffAuto::kAuto && plan.chunked &&
      plan.device == DeviceKind::kCuda)
    plan.decisions.push_back(str_cat(
        "use_cpu_embedding: off (\"auto\" on ", facts.device_name, ": ",
        facts.tied_head
            ? "the tied LM head needs the table on the GPU every step)"
            : "with the table on the host, the host would write its whole gradient in every "
              "backward, while the GPU waits, and run its Adam; the LM head is untied)"));
  c.use_cpu_embedding = config::on_off(cpu_embedding);
  // PatrickStar frees the other ranks' fp16 parameters after initialisation when it is set; pstar
  // builds each unit straight into chunks and keeps another rank's chunk only while gathered, so
  // there is never a copy to release. Said once rather than silently ignored.
  if (c.release_after_init)
    plan.decisions.push_back(
        "release_after_init: true changes nothing in pstar (units are built straight into chunks, "
        "and other ranks' chunks hold data only while gathered)");
  plan.prefetch = plan.chunked && c.engine.prefetch;
  return plan;
}

}  // namespace pstar::plan
