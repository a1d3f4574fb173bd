// The losses of a run's steps, in order: what tests compare between runs.
#pragma once

#include <vector>

#include "pstar/train/metrics.h"

namespace pstar::testing {

inline std::vector<double> losses(const std::vector<train::StepMetrics>& steps) {
  std::vector<double> out;
  for (const auto& s : steps) out.push_back(s.loss);
  return out;
}

}  // namespace pstar::testing
