// Which device each rank of a run computes on, and which collectives join the ranks (Note [rank
// device]). Pure C++ (no LibTorch), like the run plan it feeds, so that a table of facts tests it.
//
// Note [rank device]
// ~~~~~~~~~~~~~~~~~~
// A node's ranks each take a GPU of their own: local rank r computes on cuda:r, counted among the
// GPUs the process sees (CUDA_VISIBLE_DEVICES), as torchrun and DeepSpeed do. More local ranks
// than visible GPUs would put two ranks on one GPU, which NCCL refuses ("Duplicate GPU detected",
// since NCCL 2.5), so that is a ConfigError giving both counts, unless distributed.share_gpus lets
// them share: local rank r then takes cuda:(r mod visible) and the collectives go through Gloo.
// Sharing is for testing several ranks on a machine with one GPU, not for speed.
// The backend follows the device unless distributed.backend names one: nccl on a GPU, gloo on the
// CPU. nccl on the CPU, for ranks that share a GPU, or in a build without an NCCL communicator is a
// ConfigError naming nccl and what works.
// train::gather_run_facts asks once per rank, before anything touches a GPU, so that the bf16
// probe and the free-memory query already run on the rank's own GPU; the run plan carries the
// answer (RunPlan::rank) and everything after reads it.
#pragma once

#include <cstdint>
#include <string>

#include "pstar/formats/config.h"

namespace pstar::plan {

enum class DeviceKind : uint8_t { kCpu, kCuda };

// The collectives a run's ranks are joined by, decided (never "auto").
enum class CommBackend : uint8_t { kGloo, kNccl };
const char* comm_backend_name(CommBackend backend);  // "gloo", "nccl"
// What distributed.backend "auto" means on `device`: nccl on a GPU, gloo on the CPU.
CommBackend default_backend(DeviceKind device);

// What choose_rank_device decides from.
struct RankDeviceFacts {
  DeviceKind requested = DeviceKind::kCpu;  // what --device resolved to on this machine
  int64_t visible_gpus = 0;                 // GPUs this process sees (within CUDA_VISIBLE_DEVICES)
  int64_t local_rank = 0;                   // LOCAL_RANK, SLURM_LOCALID
  int64_t local_world_size = 1;             // the ranks on this node (LOCAL_WORLD_SIZE)
  // Why this build has no NCCL communicator (dist::nccl_missing_reason()); empty when it has one.
  std::string nccl_missing;
};

// One rank's compute device and the run's backend.
struct RankDevice {
  DeviceKind kind = DeviceKind::kCpu;
  int64_t index = -1;  // the CUDA ordinal; -1 on the CPU
  CommBackend backend = CommBackend::kGloo;
  bool shares_gpu = false;  // other local ranks compute on the same GPU (distributed.share_gpus)
  // The local ranks computing on this rank's GPU, itself included: they share its memory and so
  // engine.device_memory (RunPlan::device_budget_per_rank). 1 on the CPU.
  int64_t gpu_ranks = 1;
  std::string why;  // for the log: "local rank 1 of 2, 8 GPUs visible"

  std::string name() const;  // "cpu", "cuda:3": c10::Device's spelling
  // The start-up log's line: "device: cuda:1 (local rank 1 of 2, 8 GPUs visible), collectives
  // over nccl".
  std::string describe() const;
};

// Note [rank device]. Pure. ConfigError naming the key or option to change: more local ranks than
// visible GPUs without distributed.share_gpus (both counts given), a GPU asked for with none
// visible, distributed.backend "nccl" on the CPU, with shared GPUs or without `nccl_missing` empty.
RankDevice choose_rank_device(const config::DistributedConfig& distributed,
                              const RankDeviceFacts& facts);

struct RunPlan;

// Throws ConfigError when `plan` trains several ranks on GPUs over nccl and `nccl_missing` (why
// this build has no NCCL communicator, dist::nccl_missing_reason()) is not empty: such a build
// has only Gloo's, which moves GPU payloads staged through host memory (Note [staged
// collectives] in engine/group_sync.h), so the message says to set distributed.backend "gloo".
// train::plan_run refuses such a run here, before anything is built. Pure.
void check_rank_collectives(const RunPlan& plan, const std::string& nccl_missing);

}  // namespace pstar::plan
