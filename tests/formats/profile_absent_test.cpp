// Profile files in a build without HDF5 (profile_absent.cpp): every way in gives the ConfigError
// that says what is missing and how to get it, and no file is touched.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "pstar/base/error.h"
#include "pstar/formats/profile.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

using pstar::testing::message_of;
using pstar::testing::ScratchDir;

void expect_says_how_to_get_hdf5(const std::string& message, const std::string& what) {
  EXPECT_EQ(message.rfind(what + ": this build of pstar has no HDF5 profile support", 0), 0u)
      << message;
  EXPECT_NE(message.find("libhdf5-dev"), std::string::npos) << message;
  EXPECT_NE(message.find("scripts/setup-deps.sh"), std::string::npos) << message;
  EXPECT_NE(message.find("-DPSTAR_WITH_HDF5=ON"), std::string::npos) << message;
}

TEST(ProfileAbsentTest, SaysSoForEveryEntryPoint) {
  EXPECT_FALSE(profile_io_built());
  expect_says_how_to_get_hdf5(message_of<ConfigError>([] { require_profile_io("pstar profile"); }),
                              "pstar profile");

  ScratchDir scratch;
  const std::string path = scratch.file("run.h5");
  expect_says_how_to_get_hdf5(message_of<ConfigError>([&] { write_profile(path, Profile{}); }),
                              "cannot write profile '" + path + "'");
  EXPECT_FALSE(std::filesystem::exists(path));
  expect_says_how_to_get_hdf5(message_of<ConfigError>([&] { read_profile(path); }),
                              "cannot read profile '" + path + "'");
}

}  // namespace
}  // namespace pstar::formats
