// Gathering the facts a run plan is resolved from (Note [run plan] in plan/run_plan.h): the part
// that needs LibTorch and the device.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "pstar/formats/config.h"
#include "pstar/plan/run_plan.h"

namespace pstar::dist {
class Communicator;
}

namespace pstar::train {

// This run's facts, gathered once: the world from `comm` (null: one rank), this rank's compute
// device for `device_option` ("cpu", "cuda", "auto"; compute_device, then
// plan::choose_rank_device for the rank's own GPU and the backend, Note [rank device]), the bf16
// probe when bf16.enabled is "auto" (rank 0's verdict for every rank: probes are timings, and ranks
// could disagree near the threshold), and the free memory of a CUDA device when the chunk engine
// runs there without engine.device_memory. A config resolved already asks for neither. With
// bf16.enabled true, warns once when bf16 is slow or inexact on the device.
plan::RunFacts gather_run_facts(const config::TrainConfig& config, const std::string& device_option,
                                dist::Communicator* comm);

// This rank's compute device for `device_option` (Note [rank device]): compute_device, then
// plan::choose_rank_device with the GPUs this process sees and the launcher's local rank.
plan::RankDevice rank_device(const config::TrainConfig& config, const std::string& device_option,
                             int64_t local_rank, int64_t local_world_size);

// Note [numa binding] in pstar/core/numa.h: binds this process to its rank's NUMA node, unless
// distributed.numa_bind is false, and says what it did: the node and why, or why none; `notable`
// where the machine has several nodes (elsewhere the line is for debug logs). Call it before the
// thread pools and the payloads exist.
struct NumaReport {
  std::string line;
  bool notable = false;
};
NumaReport bind_rank_to_numa(const config::TrainConfig& config, const plan::RankDevice& device,
                             int64_t local_rank, int64_t local_world_size);

// gather_run_facts, then plan::resolve_run: the run plan for `config` on this machine. ConfigError
// for several ranks on GPUs over nccl, which this build lacks (plan::check_rank_collectives): they
// train over gloo. Ranks plan with the least free GPU memory any of them saw.
plan::RunPlan plan_run(const config::TrainConfig& config, const std::string& device_option,
                       dist::Communicator* comm);

// The compute device and dtype a plan names.
c10::Device plan_device(const plan::RunPlan& plan);
c10::ScalarType plan_dtype(const plan::RunPlan& plan);
// The LibTorch dtype of a precision.
c10::ScalarType precision_dtype(plan::Precision precision);

}  // namespace pstar::train
