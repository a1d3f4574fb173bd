// The thread double of the communicator (thread_ranks.h) passes the checks the Gloo rings pass
// (collective_checks.h) for 1 to 4 ranks, and a failing rank ends the others' waits.
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/dist/collective_checks.h"
#include "engine/dist/thread_ranks.h"
#include "pstar/dist/communicator.h"

namespace pstar::testing {
namespace {

TEST(ThreadRanks, CollectivesMatchIndependentSumsForOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    run_thread_ranks(n, [](dist::Communicator& comm) { return check_collectives(comm); });
  }
}

TEST(ThreadRanks, AFailingRankEndsTheOthersWaitsWithADistError) {
  const std::vector<std::string> errors =
      thread_rank_errors(4, [](dist::Communicator& comm) -> bool {
        if (comm.rank() == 2) throw std::runtime_error("rank 2 stops");
        comm.barrier();
        return true;
      });
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[2], "rank 2 stops");
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("another rank has failed"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
}

TEST(ThreadRanks, AMissingRankIsADistErrorAfterTheTimeout) {
  // Rank 1 never calls the barrier: rank 0's wait ends after the timeout.
  const std::vector<std::string> errors = thread_rank_errors(
      2,
      [](dist::Communicator& comm) {
        if (comm.rank() == 0) comm.barrier();
        return true;
      },
      std::chrono::seconds(1));
  EXPECT_NE(errors[0].find("waited more than 1 s"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace pstar::testing
