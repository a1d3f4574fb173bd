// How tests build engines from a config: its run plan on this machine's CPU, resolved the way
// `pstar train` resolves it (train::plan_run), for one rank or the ranks of `comm`.
#pragma once

#include <string>

#include "pstar/formats/config.h"
#include "pstar/plan/run_plan.h"
#include "pstar/train/run_facts.h"

namespace pstar::testing {

inline plan::RunPlan cpu_plan(const config::TrainConfig& config,
                              dist::Communicator* comm = nullptr) {
  return train::plan_run(config, "cpu", comm);
}

// The same on another device ("cuda").
inline plan::RunPlan device_plan(const config::TrainConfig& config, const std::string& device) {
  return train::plan_run(config, device, nullptr);
}

}  // namespace pstar::testing
