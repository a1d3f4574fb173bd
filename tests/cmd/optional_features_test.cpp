// The optional parts of pstar (cmake/dependencies.cmake): `pstar --help` lists `profile` and
// `visualize` in every build, and a build without HDF5 or PLplot answers them, and
// `train --profile`, at once with the ConfigError that says what is missing and how to get it.
// PSTAR_TEST_HAVE_HDF5 and PSTAR_TEST_HAVE_PLPLOT say which build this is
// (tests/cmd/CMakeLists.txt); cmd_profile_tests and cmd_visualize_tests test the commands where
// they are built.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli_util.h"
#include "test_util.h"

namespace pstar::cmd {
namespace {

using pstar::testing::ScratchDir;

constexpr bool kHaveHdf5 = PSTAR_TEST_HAVE_HDF5;
constexpr bool kHavePlplot = PSTAR_TEST_HAVE_PLPLOT;
constexpr int kConfigErrorExit = 2;  // docs/cli.md

class OptionalFeaturesTest : public ::testing::Test {
 protected:
  RunResult pstar(const std::vector<std::string>& args) { return run_pstar(args, dir_.path()); }

  ScratchDir dir_;
};

TEST_F(OptionalFeaturesTest, HelpListsProfileAndVisualize) {
  const RunResult r = pstar({"--help"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.out, "profile")) << r;
  EXPECT_TRUE(contains(r.out, "visualize")) << r;
  // A build without them says so where they are listed.
  EXPECT_EQ(contains(r.out, "not in this build: it has no HDF5"), !kHaveHdf5) << r;
  EXPECT_EQ(contains(r.out, "not in this build"), !kHavePlplot) << r;
}

// The message of a build without HDF5, after `what`: what is missing and how to get it.
void expect_no_hdf5(const RunResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, kConfigErrorExit) << r;
  EXPECT_TRUE(contains(
      r.err, "config error: " + what + ": this build of pstar has no HDF5 profile support"))
      << r;
  EXPECT_TRUE(contains(r.err, "libhdf5-dev")) << r;
  EXPECT_TRUE(contains(r.err, "scripts/setup-deps.sh")) << r;
  EXPECT_TRUE(contains(r.err, "-DPSTAR_WITH_HDF5=ON")) << r;
}

TEST_F(OptionalFeaturesTest, ProfileWithoutHdf5SaysWhatIsMissing) {
  if (kHaveHdf5) GTEST_SKIP() << "this build has HDF5; cmd_profile_tests runs pstar profile";
  // The config does not exist: the answer comes before anything is read or trained.
  const RunResult r = pstar({"profile", "missing.json", "-o", "run.h5"});
  expect_no_hdf5(r, "pstar profile");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "run.h5"));
}

TEST_F(OptionalFeaturesTest, TrainProfileWithoutHdf5SaysWhatIsMissing) {
  if (kHaveHdf5) GTEST_SKIP() << "this build has HDF5; cmd_profile_tests runs train --profile";
  expect_no_hdf5(pstar({"train", "missing.json", "--profile", "run.h5"}), "pstar train --profile");
  // Before any rank starts.
  expect_no_hdf5(pstar({"train", "missing.json", "--profile", "run.h5", "--nproc", "2"}),
                 "pstar train --profile");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "run.h5"));
}

TEST_F(OptionalFeaturesTest, VisualizeWithoutPlplotSaysWhatIsMissing) {
  if (kHavePlplot) GTEST_SKIP() << "this build has PLplot; cmd_visualize_tests runs visualize";
  // Any arguments, complete or not, get the same answer.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"visualize", "run.h5", "--fig", "memory", "-o", "memory.png"},
           {"visualize", "run.h5", "--fig", "memory"},
           {"visualize"}}) {
    const RunResult r = pstar(args);
    EXPECT_EQ(r.exit_code, kConfigErrorExit) << r;
    EXPECT_TRUE(contains(r.err, "config error: pstar visualize: this build of pstar has no ")) << r;
    EXPECT_EQ(contains(r.err, "no HDF5 profile support"), !kHaveHdf5) << r;
    for (const char* part : {"PLplot", "libplplot-dev", "plplot-driver-cairo",
                             "scripts/setup-deps.sh", "-DPSTAR_WITH_PLPLOT=ON"})
      EXPECT_TRUE(contains(r.err, part)) << part << "\n" << r;
    EXPECT_EQ(contains(r.err, "-DPSTAR_WITH_HDF5=ON"), !kHaveHdf5) << r;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "memory.png"));
  // Its help says so too.
  const RunResult help = pstar({"visualize", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help;
  EXPECT_TRUE(contains(help.out, "not in this build")) << help;
}

}  // namespace
}  // namespace pstar::cmd
