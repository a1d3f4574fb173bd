// Note [speculation by cost]
// engine.speculative_adam "auto" decides from what the run measures whether a step speculates
// (Note [speculative adam] in engine/hybrid_adam.h), so that speculation is on only where it makes
// the step faster, and never left on where it costs more than waiting for the gradient norm:
//   - it measures a window of steps that wait for the norm: their step time T_w, the time the
//     training thread waited for host Adam W (what speculation could hide at most) and host
//     Adam's seconds H (what a rollback runs again);
//   - with p the share of the last steady steps that clipped (or overflowed), it tries speculation
//     when (1 - p) W - p H, the expected saving, is more than 1% of T_w; then it measures a window
//     of speculating steps, T_s where they did not clip and T_c where they did (else T_s + H), and
//     keeps speculating only while (1 - p) T_s + p T_c < T_w;
//   - it re-checks at intervals: after kRecheckSteps speculating steps it measures a window of
//     waiting steps again and decides anew; after a losing trial it waits twice as long before the
//     next one (up to kMaxHoldSteps);
//   - it backs off after rollbacks: a speculating step that clipped is followed by 1, 2, 4, ... (up
//     to 32) steps that wait, the count doubling while speculating steps keep clipping and
//     starting again at 1 after one that did not.
// The first step of a window after the mode changed is not measured (the other mode's queued host
// Adam runs into it). Every rank must take the same decisions: what the rule reads besides the
// windows' times (the steps, which clipped, the modes) is the same on every rank, and the times are
// summed over the ranks at the end of each window (figures(), then decide() with the sums, at the
// same step everywhere: record() says when), so each rank decides from the same numbers. This
// replaces Note [run plan]'s rule of two calm steps before speculating: "auto" is now decided
// during the run, from its own figures, not by the config alone.
// engine.speculative_adam true speculates every step and warns once when kWarnClipped of its last
// kWarnWindow steps clipped (each redid its speculated chunks' host Adam). Pure C++: the trainer
// feeds it, tests drive it with made-up figures.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "pstar/plan/run_plan.h"

namespace pstar::train {

// One finished step as this rank measured it.
struct SpeculationSample {
  bool clipped = false;  // clipped or made no update (fp16 overflow): the same on every rank
  double step_s = 0;
  double adam_wait_s = 0;  // the training thread's wait for queued host Adam
  double adam_host_s = 0;  // host Adam's seconds
};

class SpeculationPolicy {
 public:
  static constexpr int64_t kWindow = 3;  // measured steps per window
  static constexpr int64_t kRecheckSteps = 48;
  static constexpr int64_t kMaxHoldSteps = 384;
  static constexpr int64_t kClipWindow = 16;
  static constexpr int64_t kMaxBackoff = 32;
  static constexpr int64_t kWarnWindow = 8, kWarnClipped = 4;
  static constexpr double kMinGain = 0.01;  // of the waiting step

  // `rule`: the run plan's; `first_steady_step`: the first step after the warm-up and the first
  // planned step (the steps before it are not measured and do not speculate under "auto").
  SpeculationPolicy(plan::RunPlan::Speculation rule, int64_t first_steady_step);

  // Whether the next step speculates.
  bool speculates() const;
  // Adds each rank's values into every rank's (a communicator's all-reduce); null on one rank.
  using SumOverRanks = std::function<void(std::vector<double>&)>;
  // Step `step` ended, speculating or not as speculates() said before it, with this rank's
  // figures. Where a window completes (at the same step on every rank), its times are summed over
  // the `ranks` ranks with `sum_over_ranks` and the next steps are decided from the sums.
  void record(int64_t step, const SpeculationSample& sample, const SumOverRanks& sum_over_ranks,
              int64_t ranks);
  // A line to log since the last call (a change of mode, or true's warning), or "".
  std::string take_message();
  bool message_is_warning() const { return warning_; }

 private:
  enum class Phase : uint8_t { kMeasureWait, kHoldWait, kMeasureSpec, kHoldSpec };
  // This rank's sums over a window's measured steps.
  struct Window {
    int64_t waiting = 0, calm = 0, clipped = 0;  // steps measured of each kind
    double step_s = 0, wait_s = 0, host_s = 0;   // over the waiting steps
    double calm_s = 0, clipped_s = 0;            // step times of the speculating steps
  };
  // What the last windows measured (means over the ranks), and which of them there are.
  struct Estimates {
    double wait_step = 0, wait_adam = 0, host_adam = 0;
    double spec_calm = 0, spec_clipped = 0;
    bool have_calm = false, have_clipped = false;
  };
  // Whether a window is complete.
  bool add(int64_t step, const SpeculationSample& sample);
  // This rank's times over the window that just completed, and the decision from their sums.
  std::vector<double> figures() const;
  void decide(const std::vector<double>& summed, int64_t ranks);
  void enter(Phase phase, int64_t hold = 0);
  double clip_share() const;
  double expected_speculating(double p) const;
  void warn_if_clipping(bool clipped);

  plan::RunPlan::Speculation rule_;
  int64_t first_steady_;
  Phase phase_ = Phase::kMeasureWait;
  int64_t hold_ = 0;                   // steps left in a hold
  int64_t next_wait_ = kRecheckSteps;  // the hold after a losing trial
  int64_t pause_ = 0, backoff_ = 1;    // waiting steps after a clipped speculating one
  bool last_speculated_ = false;       // the step recorded last
  Window window_;
  Estimates est_;
  std::deque<bool> clips_;  // the last steady steps, clipped or not
  std::string message_;
  bool warning_ = false, warned_ = false;
  bool announced_ = false;  // the mode the last message announced
};

}  // namespace pstar::train
