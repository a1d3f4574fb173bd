// A mixture of experts' routing over one step, from the model's per-forward counts
// (CausalLM::expert_tokens) and load-balancing losses: the step's RoutingMetrics.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "pstar/train/metrics.h"

namespace pstar::dist {
class Communicator;
}

namespace pstar::train {

class RoutingStats {
 public:
  // One micro-batch's forward: its tokens per expert of each sparse layer ([layers, experts]
  // int64 on the host, undefined for a dense model) and its load-balancing loss (undefined: none).
  void observe(const at::Tensor& expert_tokens, const at::Tensor& aux_loss);
  // The step's figures, over every rank of `comm` (null: one rank), each rank calling it at the
  // same point; nullopt for a dense model. Resets for the next step.
  std::optional<RoutingMetrics> finish(dist::Communicator* comm);
  // After the step's last forward, before its backward: the (sparse layer, expert) pairs given no
  // token in the whole step on any rank (Note [held parameters] in engine/adam_steps.h), over
  // every rank of `comm` (null: one rank), each rank calling it at the same point. finish() then
  // reuses the sums (one all-reduce a step either way).
  std::vector<std::pair<int64_t, int64_t>> idle_in_step(dist::Communicator* comm);

 private:
  void reduce(dist::Communicator* comm);

  std::vector<double> step_tokens_;  // [layers * experts], summed over micro-batches
  int64_t experts_ = 0;
  bool reduced_ = false;  // step_tokens_ and aux_sum_ hold the sums over the ranks (reduce)
  int64_t micro_batches_ = 0;
  double aux_sum_ = 0;
  bool aux_ = false;
  double idle_sum_ = 0;  // idle (layer, expert) pairs, summed over micro-batches
  double load_max_ = 0;  // the busiest expert over the mean, the largest of the step
};

}  // namespace pstar::train
