// The profile recorder (train/profiler.h) on its own: what it keeps per moment (Note [profile
// names]).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/formats/profile.h"
#include "pstar/train/metrics.h"
#include "pstar/train/profiler.h"

namespace pstar::train {
namespace {

TEST(Profiler, MomentNamesComeOutPerRowThoughEachIsKeptOnce) {
  if (!formats::profile_io_built())
    GTEST_SKIP() << "this build has no HDF5, and a profiler refuses to record what it cannot write";
  Profiler profiler;
  formats::Profile& setup = profiler.data();
  setup.chunks.id = {0, 1};
  const std::vector<std::string> names = {"forward of a.weight", "forward of b.weight",
                                          "backward of b.weight", "backward of a.weight",
                                          "optimizer step"};
  std::vector<std::string> expected;
  for (int64_t step = 1; step <= 3; ++step) {
    profiler.begin_step(step);
    for (const std::string& name : names) {
      profiler.begin_moment(name, formats::ProfileStage::kForward, MemorySample{}, {1, 0});
      profiler.close_moment(step);
      expected.push_back(name);
    }
    StepMetrics m;
    m.step = step;
    profiler.end_step(m);
    // Read between steps: the names so far, in row order.
    const formats::Profile& p = profiler.data();
    ASSERT_EQ(p.by_moment.size(), expected.size());
    EXPECT_EQ(p.by_moment.name, expected);
  }
  const formats::Profile& p = profiler.data();
  EXPECT_EQ(p.location.size(), 2 * expected.size());
  EXPECT_EQ(p.by_moment.step.back(), 3);
  EXPECT_EQ(p.by_moment.moment.back(), static_cast<int64_t>(names.size()) - 1);
}

}  // namespace
}  // namespace pstar::train
