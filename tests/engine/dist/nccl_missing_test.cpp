// What this build says about NCCL (Note [rank device]): a build without pstar's NCCL communicator
// names what it lacks, for distributed.backend "nccl"'s ConfigError, and refuses connect_nccl with
// that reason; a build with one says nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "pstar/base/error.h"
#include "pstar/core/torch_compat.h"
#include "pstar/dist/communicator.h"

namespace pstar::dist {
namespace {

TEST(NcclMissing, TheReasonNamesWhatThisBuildLacks) {
  const std::string reason = nccl_missing_reason();
  if (reason.empty()) GTEST_SKIP() << "this build has the NCCL communicator: nothing is missing";
  EXPECT_NE(reason.find(compat::torch_version()), std::string::npos) << reason;
#if !PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  // Debian's 1.13: what it lacks and where a build with it comes from.
  EXPECT_NE(reason.find("has no ProcessGroupNCCL"), std::string::npos) << reason;
  EXPECT_NE(reason.find("scripts/gpu-verify.sh"), std::string::npos) << reason;
#else
  EXPECT_NE(reason.find("-DPSTAR_WITH_NCCL=ON"), std::string::npos) << reason;
#endif
}

TEST(NcclMissing, ConnectingWithoutItIsAConfigErrorNamingGloo) {
  if (nccl_missing_reason().empty())
    GTEST_SKIP() << "this build has the NCCL communicator; the gpu tests train with it";
  try {
    (void)connect_nccl(nullptr, 0, std::chrono::seconds(1));
    FAIL() << "connect_nccl returned in a build without the NCCL communicator";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(nccl_missing_reason()), std::string::npos) << what;
    EXPECT_NE(what.find("\"gloo\""), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace pstar::dist
