// What this build says about NCCL (Note [rank device]): no build has pstar's NCCL communicator yet,
// and the reason names what the build lacks, for distributed.backend "nccl"'s ConfigError.
#include <gtest/gtest.h>

#include <string>

#include "pstar/core/torch_compat.h"
#include "pstar/dist/communicator.h"

namespace pstar::dist {
namespace {

TEST(NcclMissing, TheReasonNamesWhatThisBuildLacks) {
  const std::string reason = nccl_missing_reason();
  ASSERT_FALSE(reason.empty()) << "no build has an NCCL communicator yet";
  EXPECT_NE(reason.find("ProcessGroupNCCL"), std::string::npos) << reason;
  EXPECT_NE(reason.find(compat::torch_version()), std::string::npos) << reason;
  EXPECT_NE(reason.find("issue 36"), std::string::npos) << reason;
#if !PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  // Debian's 1.13: where a build with it would come from.
  EXPECT_NE(reason.find("CUDA LibTorch 2.x as scripts/gpu-verify.sh makes"), std::string::npos)
      << reason;
#endif
}

}  // namespace
}  // namespace pstar::dist
