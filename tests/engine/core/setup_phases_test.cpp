// The set-up phases' bookkeeping and the one-line split (Note [set-up phases]). Times are given,
// not measured: nothing here depends on how fast the machine is.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "pstar/core/setup_phases.h"

namespace pstar::core {
namespace {

TEST(SetupPhasesTest, AddsAndMergesPerPhase) {
  SetupPhases a;
  a.add(SetupPhase::kAlloc, 1.5, 1000);
  a.add(SetupPhase::kAlloc, 0.5, 24);
  a.add(SetupPhase::kData, 0.25);
  SetupPhases b;
  b.add(SetupPhase::kAlloc, 1.0, 1);
  b.add(SetupPhase::kPlan, 0.125);
  a.merge(b);
  EXPECT_EQ(a.seconds(SetupPhase::kAlloc), 3.0);
  EXPECT_EQ(a.bytes(SetupPhase::kAlloc), 1025);
  EXPECT_EQ(a.seconds(SetupPhase::kData), 0.25);
  EXPECT_EQ(a.seconds(SetupPhase::kPlan), 0.125);
  EXPECT_EQ(a.seconds(SetupPhase::kInit), 0.0);
  EXPECT_EQ(a.total_seconds(), 3.375);
}

TEST(SetupPhasesTest, SummaryListsPhasesInOrderWithRatesAndTheRestAsOther) {
  SetupPhases p;
  p.add(SetupPhase::kInit, 2.0, int64_t{1} << 30);  // 1 GiB in 2 s
  p.add(SetupPhase::kPlan, 0.5);
  p.add(SetupPhase::kData, 0.01);  // below the line's resolution: left out
  EXPECT_EQ(p.summary(4.0), "plan 0.5 s, init 2.0 s (1.00 GiB at 512.00 MiB/s), other 1.5 s");
  // A total below the phases' sum leaves no "other".
  EXPECT_EQ(p.summary(2.0), "plan 0.5 s, init 2.0 s (1.00 GiB at 512.00 MiB/s)");
}

TEST(SetupPhasesTest, EveryPhaseHasADistinctName) {
  std::set<std::string> names;
  for (size_t i = 0; i < kNumSetupPhases; ++i)
    names.insert(setup_phase_name(static_cast<SetupPhase>(i)));
  EXPECT_EQ(names.size(), kNumSetupPhases);
  EXPECT_EQ(names.count("other"), 0u);  // the summary's and the record's remainder
}

TEST(SetupPhasesTest, TimerAddsOnceAndNothingWithoutPhases) {
  SetupPhases p;
  {
    PhaseTimer t(&p, SetupPhase::kResume);
    t.set_bytes(7);
    const double first = t.stop();
    EXPECT_GE(first, 0.0);
    EXPECT_EQ(t.stop(), 0.0);  // already stopped: the destructor adds nothing either
  }
  EXPECT_EQ(p.bytes(SetupPhase::kResume), 7);
  PhaseTimer none(nullptr, SetupPhase::kResume);  // times into nothing
  EXPECT_GE(none.stop(), 0.0);
}

TEST(SetupPhasesTest, ProgressStaysQuietForAShortPhase) {
  SetupProgress progress("a short phase", 100);
  progress.advance(100);  // long before kShowAfterSeconds
  EXPECT_FALSE(progress.shown());
}

}  // namespace
}  // namespace pstar::core
