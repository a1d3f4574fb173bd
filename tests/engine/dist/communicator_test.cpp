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

#include "engine/dist/forked_ranks.h"
#include "pstar/base/error.h"
#include "pstar/dist/communicator.h"

namespace pstar::dist {
namespace {

using pstar::testing::free_port;
using pstar::testing::run_ranks;

uint8_t pattern(int64_t part, int64_t i) { return static_cast<uint8_t>((part * 7 + i) % 251); }
float contribution(int64_t rank, int64_t part, int64_t i) {
  return static_cast<float>((rank + 1) * 0.5 + part * 0.25 + static_cast<double>(i) * 1e-3);
}

TEST(CommunicatorTest, RingCollectivesMatchIndependentSums) {
  constexpr int kRanks = 3;
  constexpr int64_t kBytes = 1001, kNumel = 1000;
  run_ranks(kRanks, [&](Communicator& comm) {
    bool ok = true;
    auto check = [&](bool cond, const std::string& what) {
      if (!cond)
        std::fprintf(stderr, "rank %lld: %s\n", static_cast<long long>(comm.rank()), what.c_str());
      ok = ok && cond;
    };
    // All-gather: every part arrives intact, this rank's included.
    std::vector<std::vector<uint8_t>> parts(kRanks, std::vector<uint8_t>(kBytes, 0));
    for (int64_t i = 0; i < kBytes; ++i) parts[comm.rank()][i] = pattern(comm.rank(), i);
    std::vector<void*> ptrs;
    for (auto& p : parts) ptrs.push_back(p.data());
    comm.all_gather(ptrs, kBytes);
    for (int64_t j = 0; j < kRanks; ++j)
      for (int64_t i = 0; i < kBytes; ++i)
        if (parts[j][i] != pattern(j, i)) {
          check(false, "all-gather: part " + std::to_string(j) + " byte " + std::to_string(i));
          j = kRanks;
          break;
        }

    // Reduce-scatter: this rank's part summed over the ranks, against double sums.
    std::vector<float> out(kNumel, -1.0F);
    comm.reduce_scatter(
        kNumel,
        [&](int64_t part, float* acc) {
          for (int64_t i = 0; i < kNumel; ++i) acc[i] += contribution(comm.rank(), part, i);
        },
        out.data());
    for (int64_t i = 0; i < kNumel; ++i) {
      double expected = 0;
      for (int64_t r = 0; r < kRanks; ++r) expected += contribution(r, comm.rank(), i);
      if (std::abs(out[i] - expected) > 1e-6 * std::abs(expected)) {
        check(false, "reduce-scatter element " + std::to_string(i) + ": " + std::to_string(out[i]) +
                         " vs " + std::to_string(expected));
        break;
      }
    }

    check(comm.all_reduce_sum(static_cast<double>(comm.rank() + 1)) == 6.0, "all-reduce");
    const auto names = comm.exchange("name", "rank-" + std::to_string(comm.rank()));
    check(names == std::vector<std::string>{"rank-0", "rank-1", "rank-2"}, "exchange");
    comm.barrier();

    // Each rank sent N-1 parts per ring and one double in the all-reduce.
    const CommStats stats = comm.take_stats();
    check(stats.bytes_sent == (kRanks - 1) * kBytes + (kRanks - 1) * kNumel * 4 + 8,
          "bytes sent " + std::to_string(stats.bytes_sent));
    check(comm.take_stats().bytes_sent == 0, "stats are reset when taken");
    return ok;
  });
}

TEST(CommunicatorTest, AMissingPeerIsADistErrorAfterTheTimeout) {
  WorldInfo w;
  w.rank = 1;
  w.world_size = 2;
  w.port = free_port();
  try {
    Communicator comm(w, std::chrono::seconds(2));
    FAIL() << "joined a run without a master";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach the master at 127.0.0.1:"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pstar::dist
