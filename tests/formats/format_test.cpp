// The numbers of the training log: counts, durations, fixed decimals.
#include <gtest/gtest.h>

#include "pstar/base/format.h"

namespace pstar {
namespace {

TEST(FormatTest, CountsTakeTheLargestUnitTheyReach) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1.0k");
  EXPECT_EQ(format_count(12345), "12.3k");
  EXPECT_EQ(format_count(124'439'808), "124.44M");
  EXPECT_EQ(format_count(1.5e9), "1.50G");
}

TEST(FormatTest, DurationsAreMinutesAndSecondsThenHours) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(-5), "0:00");  // a negative estimate shows as nothing left
  EXPECT_EQ(format_duration(59.4), "0:59");
  EXPECT_EQ(format_duration(59.6), "1:00");  // rounded, not cut
  EXPECT_EQ(format_duration(3599), "59:59");
  EXPECT_EQ(format_duration(3600), "1:00:00");
  EXPECT_EQ(format_duration(90061), "25:01:01");
}

TEST(FormatTest, FixedHasTheDigitsAskedFor) {
  EXPECT_EQ(format_fixed(2.302585, 4), "2.3026");
  EXPECT_EQ(format_fixed(10, 4), "10.0000");
  EXPECT_EQ(format_fixed(-0.5, 1), "-0.5");
}

}  // namespace
}  // namespace pstar
