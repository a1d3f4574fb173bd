// The names of the profile's enum codes (profile_names.cpp), in every build, with HDF5 or without.
#include <gtest/gtest.h>

#include "pstar/formats/profile.h"

namespace pstar::formats {
namespace {

TEST(ProfileEnumTest, NamesAreTheFileCodes) {
  EXPECT_STREQ(to_string(ProfileStage::kForward), "forward");
  EXPECT_STREQ(to_string(ProfileStage::kOptimizer), "optimizer");
  EXPECT_STREQ(to_string(ChunkPlace::kAbsent), "absent");
  EXPECT_STREQ(to_string(ChunkPlace::kDevice), "device");
  EXPECT_STREQ(to_string(ChunkEventKind::kMoveH2D), "move_h2d");
  EXPECT_STREQ(to_string(ChunkEventKind::kAdamDevice), "adam_device");
  EXPECT_STREQ(to_string(ChunkEventKind::kReduce), "reduce");
}

}  // namespace
}  // namespace pstar::formats
