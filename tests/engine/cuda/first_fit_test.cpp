// Note [device arena]'s bookkeeping (FirstFitRanges), which DeviceArena runs over its one
// cudaMalloc; no device needed.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/cuda/memory.h"

namespace pstar::cuda {
namespace {

TEST(FirstFitRanges, RoundsSizesUpToTheAlignmentOnly) {
  FirstFitRanges r(1 << 20, 256);
  EXPECT_EQ(r.round_up(1), 256);
  EXPECT_EQ(r.round_up(256), 256);
  EXPECT_EQ(r.round_up(1000), 1024);
  EXPECT_EQ(r.round_up(3 << 20), 3 << 20);
  EXPECT_EQ(r.allocate(1000), std::optional<int64_t>(0));
  EXPECT_EQ(r.allocate(256), std::optional<int64_t>(1024));
  EXPECT_EQ(r.bytes_in_use(), 1280);
  EXPECT_EQ(r.allocation_count(), 2);
}

TEST(FirstFitRanges, TakesTheLowestFreeRangeThatFits) {
  FirstFitRanges r(10000, 1);
  const int64_t a = *r.allocate(1000);  // [0, 1000)
  const int64_t b = *r.allocate(3000);  // [1000, 4000)
  const int64_t c = *r.allocate(500);   // [4000, 4500)
  const int64_t d = *r.allocate(2000);  // [4500, 6500)
  EXPECT_EQ(r.release(a), 1000);
  EXPECT_EQ(r.release(c), 500);
  // Free: [0, 1000), [4000, 4500), [6500, 10000).
  EXPECT_EQ(r.free_range_count(), 3);
  EXPECT_EQ(r.allocate(400), std::optional<int64_t>(0));     // first fit, not best fit
  EXPECT_EQ(r.allocate(600), std::optional<int64_t>(400));   // the rest of the first hole
  EXPECT_EQ(r.allocate(700), std::optional<int64_t>(6500));  // the 500-byte hole is too small
  EXPECT_EQ(r.allocate(500), std::optional<int64_t>(4000));  // exactly the hole
  EXPECT_EQ(r.free_range_count(), 1);
  EXPECT_EQ(r.bytes_in_use(), 400 + 600 + 3000 + 500 + 2000 + 700);
  (void)b;
  (void)d;
}

TEST(FirstFitRanges, FreedNeighboursCoalesce) {
  FirstFitRanges r(4096, 256);
  std::vector<int64_t> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(*r.allocate(256));
  EXPECT_EQ(r.free_range_count(), 0);
  EXPECT_FALSE(r.allocate(1).has_value());
  // Free every other block: 8 separate holes.
  for (int i = 0; i < 16; i += 2) r.release(blocks[i]);
  EXPECT_EQ(r.free_range_count(), 8);
  EXPECT_EQ(r.largest_free_bytes(), 256);
  EXPECT_FALSE(r.allocate(512).has_value());
  // Freeing block 1 joins holes 0 and 2 (left and right neighbours at once).
  r.release(blocks[1]);
  EXPECT_EQ(r.free_range_count(), 7);
  EXPECT_EQ(r.largest_free_bytes(), 768);
  EXPECT_EQ(r.allocate(768), std::optional<int64_t>(0));
  r.release(0);
  for (int i = 3; i < 16; i += 2) r.release(blocks[i]);
  EXPECT_EQ(r.free_range_count(), 1);
  EXPECT_EQ(r.largest_free_bytes(), 4096);
  EXPECT_EQ(r.bytes_in_use(), 0);
  EXPECT_EQ(r.allocate(4096), std::optional<int64_t>(0));
}

TEST(FirstFitRanges, UsesAnUnalignedTailExactly) {
  // A capacity that is not a multiple of the alignment: its last range can still be handed out.
  FirstFitRanges r(1000, 256);
  EXPECT_EQ(r.allocate(100), std::optional<int64_t>(0));
  EXPECT_EQ(r.allocate(700), std::optional<int64_t>(256));  // 744 bytes left, 768 rounded
  EXPECT_EQ(r.bytes_in_use(), 1000);
  EXPECT_FALSE(r.allocate(1).has_value());
  EXPECT_EQ(r.release(256), 744);
  EXPECT_EQ(r.release(0), 256);
  EXPECT_EQ(r.allocate(1000), std::optional<int64_t>(0));
  EXPECT_FALSE(FirstFitRanges(1000, 256).allocate(1001).has_value());
}

TEST(FirstFitRanges, MatchesAByteMapUnderRandomTraffic) {
  // Every byte is owned by at most one allocation, and in-use/free figures add up.
  const int64_t capacity = 1 << 16;
  FirstFitRanges r(capacity, 64);
  std::vector<int> owner(capacity, -1);
  std::vector<std::pair<int64_t, int64_t>> live;  // offset, rounded size
  std::mt19937 rng(5);
  for (int it = 0; it < 20000; ++it) {
    if (live.empty() || rng() % 3 != 0) {
      const int64_t bytes = 1 + static_cast<int64_t>(rng() % 4000);
      const std::optional<int64_t> offset = r.allocate(bytes);
      if (!offset) {
        EXPECT_LT(r.largest_free_bytes(), r.round_up(bytes));
        continue;
      }
      const int64_t size = r.round_up(bytes);
      ASSERT_EQ(*offset % 64, 0);
      for (int64_t b = *offset; b < *offset + size; ++b) {
        ASSERT_EQ(owner[b], -1) << "byte " << b << " handed out twice";
        owner[b] = it;
      }
      live.emplace_back(*offset, size);
    } else {
      const size_t k = rng() % live.size();
      EXPECT_EQ(r.release(live[k].first), live[k].second);
      for (int64_t b = live[k].first; b < live[k].first + live[k].second; ++b) owner[b] = -1;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    int64_t used = 0;
    for (const auto& [offset, size] : live) used += size;
    ASSERT_EQ(r.bytes_in_use(), used);
    ASSERT_EQ(r.bytes_free(), capacity - used);
  }
}

TEST(FirstFitRanges, DescribesTheFreeSpaceForMessages) {
  FirstFitRanges r(4 << 20, 256);
  const int64_t a = *r.allocate(1 << 20);
  r.allocate(1 << 20);
  r.release(a);
  EXPECT_EQ(r.describe_free(), "3.00 MiB free of 4.00 MiB in 2 free ranges, the largest 2.00 MiB");
}

TEST(FirstFitRanges, RejectsMisuse) {
  EXPECT_THROW(FirstFitRanges(100, 3), ConfigError);
  EXPECT_THROW(FirstFitRanges(-1, 256), ConfigError);
  FirstFitRanges r(1024, 256);
  EXPECT_THROW(r.allocate(0), ConfigError);
  EXPECT_THROW(r.release(512), InternalError);
}

}  // namespace
}  // namespace pstar::cuda
