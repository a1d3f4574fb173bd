// Note [speculation by cost]: "auto" speculates only where the run's own figures say a step is
// faster, re-checks against steps that wait, backs off after rollbacks and never speculates while
// steps keep clipping; true warns once when its steps keep clipping; every rank takes the same
// decisions from figures summed over the ranks, whatever each measured alone. Driven by made-up
// figures, one step at a time, as the trainer drives it.
#include "pstar/train/speculation_policy.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/dist/thread_ranks.h"

namespace pstar::train {
namespace {

using Rule = plan::RunPlan::Speculation;
constexpr int64_t kFirstSteady = 3;

// What a step costs in each mode, and whether it clips.
struct Machine {
  double wait_step = 1.0, wait_adam = 0.4, host_adam = 0.5;
  double spec_step = 0.7;
  std::function<bool(int64_t)> clips = [](int64_t) { return false; };
};

// Steps 1..n through `policy`; what each step did (true: speculated).
std::vector<bool> drive(SpeculationPolicy& policy, const Machine& machine, int64_t n,
                        const SpeculationPolicy::SumOverRanks& sum = nullptr, int64_t ranks = 1) {
  std::vector<bool> modes;
  for (int64_t step = 1; step <= n; ++step) {
    const bool speculating = policy.speculates();
    modes.push_back(speculating);
    SpeculationSample s;
    s.clipped = machine.clips(step);
    s.step_s =
        speculating ? machine.spec_step + (s.clipped ? machine.host_adam : 0.0) : machine.wait_step;
    s.adam_wait_s = speculating ? 0.0 : machine.wait_adam;
    s.adam_host_s = machine.host_adam;
    policy.record(step, s, sum, ranks);
  }
  return modes;
}

int64_t first_speculating(const std::vector<bool>& modes) {
  for (size_t i = 0; i < modes.size(); ++i)
    if (modes[i]) return static_cast<int64_t>(i) + 1;
  return -1;
}

TEST(SpeculationPolicy, SpeculatesAfterAWindowOfWaitingStepsWhereItSavesTime) {
  SpeculationPolicy policy(Rule::kByCost, kFirstSteady);
  const std::vector<bool> modes = drive(policy, Machine{}, 12);
  // Steps 3, 4 and 5 wait and are measured; 6 on speculates.
  EXPECT_EQ(first_speculating(modes), kFirstSteady + SpeculationPolicy::kWindow);
  for (int64_t step = 6; step <= 12; ++step) EXPECT_TRUE(modes[step - 1]) << step;
  EXPECT_NE(policy.take_message().find("speculating"), std::string::npos);
  EXPECT_EQ(policy.take_message(), "") << "said once";
}

TEST(SpeculationPolicy, ReChecksAgainstWaitingStepsAtIntervals) {
  SpeculationPolicy policy(Rule::kByCost, kFirstSteady);
  const std::vector<bool> modes = drive(policy, Machine{}, 80);
  // After the trial window (6 to 9) and kRecheckSteps speculating steps, a window of waiting steps
  // (one more first, the transition), then speculation again: it still wins.
  const int64_t hold_end = 9 + SpeculationPolicy::kRecheckSteps;
  EXPECT_TRUE(modes[hold_end - 1]);
  for (int64_t step = hold_end + 1; step <= hold_end + 1 + SpeculationPolicy::kWindow; ++step)
    EXPECT_FALSE(modes[step - 1]) << step;
  EXPECT_TRUE(modes[hold_end + SpeculationPolicy::kWindow + 1]);
  EXPECT_TRUE(modes.back());
}

// Speculating is slower here (its steps take longer than waiting ones): tried once, dropped, and
// not tried again while the figures stay as they are.
TEST(SpeculationPolicy, StopsWhereSpeculatingStepsAreSlower) {
  Machine slow;
  slow.spec_step = 1.3;
  SpeculationPolicy policy(Rule::kByCost, kFirstSteady);
  const std::vector<bool> modes = drive(policy, slow, 200);
  int64_t speculated = 0;
  for (bool m : modes) speculated += m ? 1 : 0;
  EXPECT_EQ(speculated, 1 + SpeculationPolicy::kWindow) << "one trial window";
  EXPECT_FALSE(modes.back());
}

// Early training: every step clips, so a rollback would follow every speculation.
TEST(SpeculationPolicy, NeverSpeculatesWhileStepsKeepClipping) {
  Machine clipping;
  clipping.clips = [](int64_t) { return true; };
  SpeculationPolicy policy(Rule::kByCost, kFirstSteady);
  EXPECT_EQ(first_speculating(drive(policy, clipping, 200)), -1);
  // Nothing to wait for either: no gain, no trial.
  Machine idle;
  idle.wait_adam = 0;
  SpeculationPolicy none(Rule::kByCost, kFirstSteady);
  EXPECT_EQ(first_speculating(drive(none, idle, 200)), -1);
}

// A speculating step that clips is followed by steps that wait, 1, then 2, then 4 while the
// speculating steps in between keep clipping.
TEST(SpeculationPolicy, BacksOffAfterRollbacks) {
  Machine m;
  m.clips = [](int64_t step) { return step >= 12 && step < 30; };
  SpeculationPolicy policy(Rule::kByCost, kFirstSteady);
  const std::vector<bool> modes = drive(policy, m, 30);
  // 12 speculates and clips: 13 waits; 14 speculates and clips: 15, 16 wait; 17 speculates.
  EXPECT_TRUE(modes[12 - 1]);
  EXPECT_FALSE(modes[13 - 1]);
  EXPECT_TRUE(modes[14 - 1]);
  EXPECT_FALSE(modes[15 - 1]);
  EXPECT_FALSE(modes[16 - 1]);
  EXPECT_TRUE(modes[17 - 1]);
  for (int64_t step = 18; step <= 20; ++step) EXPECT_FALSE(modes[step - 1]) << step;
}

TEST(SpeculationPolicy, TrueWarnsOnceWhenItsStepsKeepClipping) {
  Machine m;
  m.clips = [](int64_t step) { return step % 2 == 0; };
  SpeculationPolicy policy(Rule::kAlways, kFirstSteady);
  std::vector<std::string> messages;
  for (int64_t step = 1; step <= 40; ++step) {
    EXPECT_TRUE(policy.speculates());
    SpeculationSample s;
    s.clipped = m.clips(step);
    policy.record(step, s, nullptr, 1);
    const std::string message = policy.take_message();
    if (!message.empty()) messages.push_back(message);
  }
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_TRUE(policy.message_is_warning());
  EXPECT_NE(messages[0].find("engine.speculative_adam is true"), std::string::npos);
  SpeculationPolicy off(Rule::kOff, kFirstSteady);
  EXPECT_EQ(first_speculating(drive(off, Machine{}, 40)), -1);
}

// Two ranks that measure differently: alone, the first (nothing to wait for, slower speculating)
// would never speculate and the second would. Deciding from the figures summed over the ranks,
// they take the same decision at every step (and, the mean favouring it here, speculate).
TEST(SpeculationPolicy, EveryRankDecidesAlikeFromTheSummedFigures) {
  Machine machines[2];
  machines[0].wait_adam = 0;
  machines[0].spec_step = 1.2;
  machines[1].wait_adam = 0.8;
  machines[1].spec_step = 0.5;
  std::vector<bool> modes[2];
  pstar::testing::run_thread_ranks(2, [&](dist::Communicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    SpeculationPolicy policy(Rule::kByCost, kFirstSteady);
    modes[r] = drive(
        policy, machines[r], 60, [&](std::vector<double>& v) { comm.all_reduce_sum(v); },
        comm.world_size());
    return true;
  });
  EXPECT_EQ(modes[0], modes[1]);
  EXPECT_NE(first_speculating(modes[0]), -1);
}

}  // namespace
}  // namespace pstar::train
