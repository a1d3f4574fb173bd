// The exact-size host pool (Note [exact-size host pool]) and the counter shape it reports with.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/memory/host_pool.h"
#include "pstar/memory/stat.h"

namespace pstar::memory {
namespace {

TEST(Stat, CountsCurrentPeakAndTotals) {
  Stat s;
  s.increase(100);
  s.increase(50);
  s.decrease(120);
  EXPECT_EQ(s.current, 30);
  EXPECT_EQ(s.peak, 150);
  EXPECT_EQ(s.allocated, 150);
  EXPECT_EQ(s.freed, 120);
  s.reset_peak();
  EXPECT_EQ(s.peak, 30);
  s.increase(10);
  EXPECT_EQ(s.peak, 40);
  EXPECT_EQ(s.allocated - s.freed, s.current);
}

TEST(HostPool, BlocksHaveExactlyTheSizeAskedAndAreAligned) {
  HostPool pool;
  HostBlock a = pool.acquire(1000);
  HostBlock b = pool.acquire(4096);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a.bytes(), 1000);
  EXPECT_EQ(b.bytes(), 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  std::memset(a.data(), 1, 1000);  // the whole block is usable
  std::memset(b.data(), 2, 4096);
  const HostPool::Stats s = pool.stats();
  EXPECT_EQ(s.reserved.current, 5096);  // no rounding to size classes
  EXPECT_EQ(s.in_use.current, 5096);
  EXPECT_EQ(s.blocks, 2);
  EXPECT_EQ(s.free_blocks, 0);
  EXPECT_FALSE(pool.acquire(0)) << "an empty block for 0 bytes";
  EXPECT_THROW(pool.acquire(-1), InternalError);
}

TEST(HostPool, AFreedBlockServesTheNextRequestOfItsExactSizeAsItIs) {
  HostPool pool;
  HostBlock a = pool.acquire(1 << 20);
  void* const first = a.data();
  std::memset(first, 0x5A, 1 << 20);
  a.reset();
  EXPECT_FALSE(a);
  HostPool::Stats s = pool.stats();
  EXPECT_EQ(s.reserved.current, 1 << 20);  // kept for reuse
  EXPECT_EQ(s.in_use.current, 0);
  EXPECT_EQ(s.free_blocks, 1);
  // Another size does not take it.
  HostBlock other = pool.acquire((1 << 20) + 64);
  EXPECT_NE(other.data(), first);
  // Its own size does, unzeroed: a move's destination is about to be overwritten anyway.
  HostBlock again = pool.acquire(1 << 20);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(static_cast<const uint8_t*>(again.data())[12345], 0x5A);
  s = pool.stats();
  EXPECT_EQ(s.reserved.allocated, (1 << 20) + (1 << 20) + 64);  // only two fresh allocations
  EXPECT_EQ(s.in_use.allocated, 3 * (1 << 20) + 64);            // three hand-outs
  EXPECT_EQ(s.free_blocks, 0);
}

TEST(HostPool, ALoopOfMovesStopsAllocatingAfterItsFirstRound) {
  HostPool pool;
  std::vector<HostBlock> held;
  for (int i = 0; i < 4; ++i) held.push_back(pool.acquire(4096));
  const int64_t after_first_round = pool.stats().reserved.allocated;
  for (int round = 0; round < 100; ++round) {
    // A move: the destination first, then the source goes back.
    HostBlock moved = pool.acquire(4096);
    held[static_cast<size_t>(round % 4)] = std::move(moved);
  }
  const HostPool::Stats s = pool.stats();
  EXPECT_EQ(s.reserved.current, 5 * 4096);  // four held and one in flight at the peak
  EXPECT_EQ(s.reserved.allocated, after_first_round + 4096);
  EXPECT_EQ(s.reserved.peak, 5 * 4096);
  EXPECT_EQ(s.in_use.current, 4 * 4096);
}

TEST(HostPool, ReleaseFreeGivesBackOnlyFreeBlocks) {
  HostPool pool;
  HostBlock kept = pool.acquire(300);
  pool.acquire(200).reset();
  pool.acquire(100);  // a temporary: freed at once
  EXPECT_EQ(pool.stats().reserved.current, 600);
  EXPECT_EQ(pool.release_free(), 300);
  HostPool::Stats s = pool.stats();
  EXPECT_EQ(s.reserved.current, 300);
  EXPECT_EQ(s.reserved.freed, 300);
  EXPECT_EQ(s.blocks, 1);
  EXPECT_EQ(s.free_blocks, 0);
  EXPECT_EQ(pool.release_free(), 0);
  kept.reset();
  EXPECT_EQ(pool.release_free(), 300);
  EXPECT_EQ(pool.stats().reserved.current, 0);
}

// The free list's threads and lifetimes are tested over a recording source
// (exact_size_pool_test.cpp); here, that mapped memory stays usable once the pool object is gone.
// Note [huge pages for payloads]: a large block's mapping is eligible for transparent huge pages
// (the kernel's "THPeligible" for its mapping in /proc/self/smaps), a small one's is not advised.
std::string smaps_field_of(const void* address, const std::string& field) {
  std::ifstream in("/proc/self/smaps");
  const auto where = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {  // a mapping's first line
      inside = where >= begin && where < end;
    } else if (inside && line.rfind(field + ":", 0) == 0) {
      return line.substr(field.size() + 1);
    }
  }
  return "";
}

TEST(HostPool, LargeBlocksAreAdvisedIntoHugePages) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (setting.find("[never]") != std::string::npos || setting.empty())
    GTEST_SKIP() << "transparent huge pages are off here (" << setting << "): nothing to advise";
  HostPool pool;
  HostBlock large = pool.acquire(kHugePageBytes * 4);
  const std::string eligible = smaps_field_of(large.data(), "THPeligible");
  if (eligible.empty()) GTEST_SKIP() << "this kernel's smaps has no THPeligible field";
  EXPECT_NE(eligible.find('1'), std::string::npos) << "THPeligible:" << eligible;
  if (setting.find("[madvise]") != std::string::npos) {
    // Under "madvise" only advised mappings are eligible: a small block is left alone.
    HostBlock small = pool.acquire(64 << 10);
    EXPECT_NE(smaps_field_of(small.data(), "THPeligible").find('0'), std::string::npos);
  }
}

TEST(HostPool, MappedBlocksOutliveThePool) {
  HostBlock survivor;
  {
    HostPool pool;
    pool.acquire(64).reset();
    survivor = pool.acquire(64);
  }
  std::memset(survivor.data(), 0, 64);
  survivor.reset();
}

}  // namespace
}  // namespace pstar::memory
