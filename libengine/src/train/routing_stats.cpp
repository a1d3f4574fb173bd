#include "routing_stats.h"

#include <algorithm>
#include <utility>

#include "pstar/base/error.h"
#include "pstar/dist/communicator.h"

namespace pstar::train {

void RoutingStats::observe(const at::Tensor& expert_tokens, const at::Tensor& aux_loss) {
  if (!expert_tokens.defined()) return;
  const at::Tensor counts = expert_tokens.to(at::kLong).contiguous();
  const int64_t layers = counts.size(0), experts = counts.size(1);
  PSTAR_INTERNAL_ASSERT(!reduced_, "a forward after the step's routing was reduced");
  experts_ = experts;
  const int64_t* c = counts.data_ptr<int64_t>();
  step_tokens_.resize(static_cast<size_t>(layers * experts), 0.0);
  for (int64_t l = 0; l < layers; ++l) {
    int64_t total = 0, busiest = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t n = c[l * experts + e];
      step_tokens_[static_cast<size_t>(l * experts + e)] += static_cast<double>(n);
      idle_sum_ += n == 0 ? 1 : 0;
      total += n;
      busiest = std::max(busiest, n);
    }
    if (total > 0)
      load_max_ = std::max(load_max_, static_cast<double>(busiest) * static_cast<double>(experts) /
                                          static_cast<double>(total));
  }
  if (aux_loss.defined()) {
    aux_sum_ += aux_loss.item<double>();
    aux_ = true;
  }
  ++micro_batches_;
}

// The step's tokens per expert and aux losses summed over the ranks, once: by idle_in_step before
// the last backward, or by finish.
void RoutingStats::reduce(dist::Communicator* comm) {
  if (reduced_) return;
  reduced_ = true;
  if (comm == nullptr) return;
  std::vector<double> values = step_tokens_;
  values.push_back(aux_sum_);
  comm->all_reduce_sum(values);
  aux_sum_ = values.back();
  values.pop_back();
  step_tokens_ = std::move(values);
}

std::vector<std::pair<int64_t, int64_t>> RoutingStats::idle_in_step(dist::Communicator* comm) {
  std::vector<std::pair<int64_t, int64_t>> idle;
  if (micro_batches_ == 0 || experts_ == 0) return idle;
  reduce(comm);
  for (size_t i = 0; i < step_tokens_.size(); ++i)
    if (step_tokens_[i] == 0)
      idle.emplace_back(static_cast<int64_t>(i) / experts_, static_cast<int64_t>(i) % experts_);
  return idle;
}

std::optional<RoutingMetrics> RoutingStats::finish(dist::Communicator* comm) {
  if (micro_batches_ == 0) return std::nullopt;
  reduce(comm);
  RoutingMetrics m;
  const double ranks = comm != nullptr ? static_cast<double>(comm->world_size()) : 1.0;
  m.idle_in_step = static_cast<int64_t>(std::count(step_tokens_.begin(), step_tokens_.end(), 0.0));
  m.aux_loss = aux_ ? aux_sum_ / (static_cast<double>(micro_batches_) * ranks) : -1;
  m.idle_experts = idle_sum_ / static_cast<double>(micro_batches_);
  m.load_max_over_mean = load_max_;
  *this = RoutingStats{};
  return m;
}

}  // namespace pstar::train
