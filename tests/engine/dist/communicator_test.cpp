// The ring collectives (Note [ring collectives]) between three real processes over Gloo: each
// result is checked against values computed here independently, in double precision.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/dist/collective_checks.h"
#include "engine/dist/forked_ranks.h"
#include "pstar/base/error.h"
#include "pstar/dist/communicator.h"

namespace pstar::dist {
namespace {

using pstar::testing::free_port;
using pstar::testing::run_ranks;

TEST(CommunicatorTest, RingCollectivesMatchIndependentSums) {
  run_ranks(3, [&](Communicator& comm) { return pstar::testing::check_collectives(comm); });
}

TEST(CommunicatorTest, AMissingPeerIsADistErrorAfterTheTimeout) {
  WorldInfo w;
  w.rank = 1;
  w.world_size = 2;
  w.port = free_port();
  try {
    const auto comm = connect_gloo(w, std::chrono::seconds(2));
    FAIL() << "joined a run without a master";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach the master at 127.0.0.1:"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pstar::dist
