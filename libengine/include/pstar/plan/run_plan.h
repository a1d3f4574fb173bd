// The run plan: what a training run is, decided once from the config and the facts of the machine
// it runs on, and read by everything after (Note [run plan]). Pure C++ (no LibTorch), so that
// `pstar estimate --config` resolves the same plan for hypothetical facts, and a table of configs
// and facts tests it.
//
// Note [run plan]
// A config says what the user asked for, with "auto" and unset keys where the machine should
// decide. Before, each part of a run decided those on its own: the precision in three places, the
// device budget in four, the global batch before the world size was known. Now one function,
// resolve_run, turns the config and the RunFacts (the world size, the compute device, what the
// bf16 probe measured, the free device memory), gathered once and agreed by every rank, into a
// RunPlan. Its `config` is the config with every "auto" decided, and the decisions are logged from
// `decisions`. Gathering the facts needs LibTorch and the device (train/run_facts.h); resolving
// them does not. One "auto" is not decided here: engine.speculative_adam's depends on what the
// run's own steps cost (host Adam's rate, the overlap it gains, how often steps clip), which no
// fact gathered before the first step says, so the plan gives the rule (Speculation::kByCost) and
// the trainer decides step by step from the figures it measures, summed over the ranks so that
// every rank decides alike (Note [speculation by cost] in train/speculation_policy.h); the config
// keeps "auto".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pstar/formats/config.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/plan/rank_device.h"

namespace pstar::plan {

enum class Precision : uint8_t { kFp32, kBf16, kFp16 };
const char* precision_name(Precision precision);  // "fp32", "bf16", "fp16"
// The precision `name` spells ("fp32", "bf16", "fp16"); nullopt for anything else.
std::optional<Precision> precision_from_name(const std::string& name);
// Bytes of one element of the compute dtype: 4, or 2 for bf16 and fp16.
int64_t elem_bytes(Precision precision);
// The precision of a config whose bf16.enabled is decided (true or false): bf16, fp16 or fp32.
// The one rule from the keys to the precision, which resolve_run applies once "auto" is decided.
// Throws ConfigError for bf16.enabled "auto": only a run plan decides it.
Precision decided_precision(const config::TrainConfig& config);

// What this process found out about its run, gathered once: the device is this rank's own (Note
// [rank device]); the bf16 verdict is rank 0's for every rank.
struct RunFacts {
  int64_t world_size = 1;
  int64_t ranks_per_host = 1;  // ranks sharing this host's memory (and engine.host_memory)
  DeviceKind device = DeviceKind::kCpu;
  std::string device_name = "cpu";  // for messages: "cpu", "cuda:0"
  // This rank's device and the backend, as choose_rank_device chose them for a run on this machine
  // (Note [rank device]); unset for hypothetical hardware (pstar estimate), where the device is
  // `device` and the backend follows it.
  std::optional<RankDevice> rank;
  // Whether bf16 is fast and accurate on the device (the start-up probe on a CPU); needed only
  // when bf16.enabled is "auto". `bf16_evidence` says why, for the log.
  std::optional<bool> bf16_fast;
  std::string bf16_evidence;
  // Free memory on a CUDA device; needed only when the chunk engine runs there without
  // engine.device_memory.
  std::optional<int64_t> free_device_bytes;
  int64_t physical_memory_bytes = 0;  // the defaults of the budgets are a share of it
  // The model's LM head is the token embedding's table (GPT; a Llama with tie_word_embeddings):
  // the reason use_cpu_embedding's "auto" gives on a GPU depends on it (Note [cpu embedding]).
  bool tied_head = true;
};

// Everything the rest of a run reads about its shape.
struct RunPlan {
  config::TrainConfig config;  // as given, with bf16.enabled and engine.overlap_adam decided (never
                               // "auto") and a CUDA budget set
  bool chunked = true;         // engine.mode "chunked"; else "torch"
  Precision precision = Precision::kFp32;
  DeviceKind device = DeviceKind::kCpu;
  std::string device_name = "cpu";
  RankDevice rank;  // this rank's device and the run's backend (Note [rank device])
  int64_t world_size = 1;
  int64_t ranks_per_host = 1;
  int64_t micro_batch = 1;   // sequences per rank per micro-batch
  int64_t accumulation = 1;  // micro-batches per step
  int64_t global_batch = 1;  // sequences per step over every rank: micro × accumulation × world
  Budgets budgets;           // engine.device_memory and engine.host_memory, defaults applied
  int64_t host_budget_per_rank = 0;  // the ranks on a host share its budget
  // Ranks sharing one GPU (distributed.share_gpus) share its budget the same way:
  // engine.device_memory (or its default, a share of the GPU's free memory) is the GPU's, and each
  // of its rank.gpu_ranks ranks gets an equal part. budgets.device on the CPU's emulated tier.
  int64_t device_budget_per_rank = 0;
  bool prefetch = true;
  bool overlap_adam = false;
  // Several ranks: collectives on a communication thread beside compute, reductions as groups
  // complete and gathers a moment ahead (Note [collectives beside compute] in
  // engine/group_sync.h). On unless PSTAR_OVERLAP_COMM=0 (train::plan_run).
  bool overlap_comm = true;
  // Note [flat gathers] in engine/group_sync.h: the most a device communicator's reduction buffer
  // takes (plan::reduce_buffer_bytes); tests lower it to reduce in several pieces.
  int64_t reduce_buffer_cap = kReduceBufferBytes;
  // Note [speculative adam]: kOff, kAlways (engine.speculative_adam true) or kByCost ("auto" with
  // the worker, where the update waits for the norm: the run decides from its own measured figures
  // whether a step speculates, every rank alike; Note [speculation by cost] in
  // train/speculation_policy.h).
  enum class Speculation { kOff, kAlways, kByCost };
  Speculation speculation = Speculation::kOff;
  // One log line per decision the plan made for the user ("precision: bf16 (...)").
  std::vector<std::string> decisions;

  // Bytes of one element of the compute dtype: 4, or 2 for bf16 and fp16.
  int64_t compute_elem_bytes() const { return elem_bytes(precision); }
};

// The share of a CUDA device's free memory engine.device_memory defaults to: the rest is left to
// the CUDA context's growth, cuBLAS workspaces and the caching allocator's slack.
inline constexpr double kCudaFreeMemoryRatio = 0.9;

// engine.overlap_adam on `device`: its "auto" is on for a GPU, where the device computes while the
// host updates, and off on the emulated tier, where both would share the CPU's cores (Note [host
// adam overlap]). resolve_run decides with it; engines read the plan's decision.
bool overlap_adam_on(config::OnOffAuto overlap_adam, DeviceKind device);

// use_cpu_embedding on `device`: its "auto" is off for a GPU and on for the emulated tier (Note
// [cpu embedding]). resolve_run decides with it; every later reader sees true or false.
bool cpu_embedding_on(config::OnOffAuto use_cpu_embedding, DeviceKind device);

// A use_cpu_embedding that resolve_run has decided (a run's config, a checkpoint's); "auto" here
// is a ConfigError saying that only a run decides it.
bool decided_cpu_embedding(const config::TrainConfig& config);

// Resolves `config` for `facts` (Note [run plan]). Pure. Throws ConfigError for what no machine
// could run: train_batch_size unequal to micro × accumulation × world size, several ranks with
// the torch engine; a missing fact the config needs is an InternalError.
RunPlan resolve_run(const config::TrainConfig& config, const RunFacts& facts);

}  // namespace pstar::plan
