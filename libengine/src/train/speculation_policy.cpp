// Note [speculation by cost] in pstar/train/speculation_policy.h.
#include "pstar/train/speculation_policy.h"

#include <algorithm>

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/base/strings.h"

namespace pstar::train {

using Rule = plan::RunPlan::Speculation;

SpeculationPolicy::SpeculationPolicy(Rule rule, int64_t first_steady_step)
    : rule_(rule), first_steady_(first_steady_step) {}

bool SpeculationPolicy::speculates() const {
  switch (rule_) {
    case Rule::kOff:
      return false;
    case Rule::kAlways:
      return true;
    case Rule::kByCost:
      return (phase_ == Phase::kMeasureSpec || phase_ == Phase::kHoldSpec) && pause_ == 0;
  }
  return false;
}

void SpeculationPolicy::enter(Phase phase, int64_t hold) {
  phase_ = phase;
  hold_ = hold;
  window_ = Window{};
  pause_ = 0;
  backoff_ = 1;
}

double SpeculationPolicy::clip_share() const {
  if (clips_.empty()) return 0;
  const auto clipped = std::count(clips_.begin(), clips_.end(), true);
  return static_cast<double>(clipped) / static_cast<double>(clips_.size());
}

// A speculating step that clips ran its speculated chunks' host Adam twice: without one measured,
// it is taken as a calm one plus host Adam's seconds.
double SpeculationPolicy::expected_speculating(double p) const {
  const double calm = est_.have_calm      ? est_.spec_calm
                      : est_.have_clipped ? est_.spec_clipped - est_.host_adam
                                          : est_.wait_step;
  const double clipped = est_.have_clipped ? est_.spec_clipped : calm + est_.host_adam;
  return (1 - p) * calm + p * clipped;
}

void SpeculationPolicy::warn_if_clipping(bool clipped) {
  clips_.push_back(clipped);
  while (static_cast<int64_t>(clips_.size()) > kWarnWindow) clips_.pop_front();
  const auto n = std::count(clips_.begin(), clips_.end(), true);
  if (warned_ || n < kWarnClipped) return;
  warned_ = true;
  warning_ = true;
  message_ =
      str_cat("engine.speculative_adam is true, but ", n, " of the last ", clips_.size(),
              " steps clipped or overflowed, and such a step runs host Adam twice for each "
              "speculated chunk whose update had started (adam_rolled_back_chunks); \"auto\" "
              "waits for the gradient norm where speculating costs more than it saves");
}

void SpeculationPolicy::record(int64_t step, const SpeculationSample& sample,
                               const SumOverRanks& sum_over_ranks, int64_t ranks) {
  if (!add(step, sample)) return;
  std::vector<double> sums = figures();
  if (sum_over_ranks) sum_over_ranks(sums);
  decide(sums, ranks);
}

bool SpeculationPolicy::add(int64_t step, const SpeculationSample& sample) {
  if (rule_ == Rule::kAlways) {
    if (step >= first_steady_) warn_if_clipping(sample.clipped);
    return false;
  }
  if (rule_ != Rule::kByCost || step < first_steady_) return false;
  const bool speculated = speculates();
  // The first step after a change of mode carries the other mode's queued work: not measured.
  const bool transition = speculated != last_speculated_;
  last_speculated_ = speculated;
  clips_.push_back(sample.clipped);
  while (static_cast<int64_t>(clips_.size()) > kClipWindow) clips_.pop_front();

  if (phase_ == Phase::kMeasureSpec || phase_ == Phase::kHoldSpec) {
    if (!speculated) {
      --pause_;
    } else if (sample.clipped) {
      pause_ = backoff_;  // back off: the next steps wait
      backoff_ = std::min(2 * backoff_, kMaxBackoff);
    } else {
      backoff_ = 1;
    }
  }
  switch (phase_) {
    case Phase::kMeasureWait:
      if (transition) return false;
      ++window_.waiting;
      window_.step_s += sample.step_s;
      window_.wait_s += sample.adam_wait_s;
      window_.host_s += sample.adam_host_s;
      return window_.waiting == kWindow;
    case Phase::kHoldWait:
      if (--hold_ <= 0) enter(Phase::kMeasureWait);
      return false;
    case Phase::kMeasureSpec:
      if (!speculated || transition) return false;
      if (sample.clipped) {
        ++window_.clipped;
        window_.clipped_s += sample.step_s;
      } else {
        ++window_.calm;
        window_.calm_s += sample.step_s;
      }
      return window_.calm + window_.clipped == kWindow;
    case Phase::kHoldSpec:
      // Then a window of waiting steps again, to compare against (the re-check).
      if (--hold_ <= 0) enter(Phase::kMeasureWait);
      return false;
  }
  return false;
}

std::vector<double> SpeculationPolicy::figures() const {
  return {window_.step_s, window_.wait_s, window_.host_s, window_.calm_s, window_.clipped_s};
}

void SpeculationPolicy::decide(const std::vector<double>& summed, int64_t ranks) {
  PSTAR_INTERNAL_ASSERT(summed.size() == 5 && ranks >= 1, "speculation figures: ", summed.size(),
                        " values over ", ranks, " ranks");
  const auto mean = [&](double sum, int64_t steps) {
    return sum / static_cast<double>(steps * ranks);
  };
  const double p = clip_share();
  const bool trial = phase_ == Phase::kMeasureWait;
  bool speculate = false;
  if (trial) {
    est_.wait_step = mean(summed[0], window_.waiting);
    est_.wait_adam = mean(summed[1], window_.waiting);
    est_.host_adam = mean(summed[2], window_.waiting);
    const bool measured = est_.have_calm || est_.have_clipped;
    speculate = measured
                    ? expected_speculating(p) < est_.wait_step
                    : (1 - p) * est_.wait_adam - p * est_.host_adam > kMinGain * est_.wait_step;
  } else {
    PSTAR_INTERNAL_ASSERT(phase_ == Phase::kMeasureSpec, "a decision outside a window");
    est_.have_calm = window_.calm > 0;
    est_.have_clipped = window_.clipped > 0;
    if (est_.have_calm) est_.spec_calm = mean(summed[3], window_.calm);
    if (est_.have_clipped) est_.spec_clipped = mean(summed[4], window_.clipped);
    speculate = expected_speculating(p) < est_.wait_step;
  }
  // What speculating is expected to take a step, measured or (before a trial) predicted.
  const double speculating = est_.have_calm || est_.have_clipped
                                 ? expected_speculating(p)
                                 : est_.wait_step - (1 - p) * est_.wait_adam + p * est_.host_adam;
  if (speculate) {
    if (!trial) next_wait_ = kRecheckSteps;
    enter(trial ? Phase::kMeasureSpec : Phase::kHoldSpec, trial ? 0 : kRecheckSteps);
  } else {
    enter(Phase::kHoldWait, next_wait_);
    if (!trial) next_wait_ = std::min(2 * next_wait_, kMaxHoldSteps);
  }
  if (speculate == announced_) return;  // a re-check that changed nothing
  announced_ = speculate;
  warning_ = false;
  message_ = str_cat(
      "speculative Adam (\"auto\"): ", speculate ? "speculating" : "waiting for the gradient norm",
      " (a step ", format_fixed(speculating, 3), " s speculating",
      est_.have_calm || est_.have_clipped ? "" : ", predicted", ", ",
      format_fixed(est_.wait_step, 3), " s waiting, ", format_fixed(est_.wait_adam, 3),
      " s of it for host Adam; ", format_fixed(100 * p, 0), "% of the last ", clips_.size(),
      " steps clipped)", speculate ? "" : str_cat("; it checks again in ", hold_, " steps"));
}

std::string SpeculationPolicy::take_message() {
  std::string out;
  out.swap(message_);
  return out;
}

}  // namespace pstar::train
