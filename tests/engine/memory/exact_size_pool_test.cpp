// The free list shared by memory::HostPool and cuda::PinnedHostPool (Note [exact-size host pool]),
// over a source that records every allocation and release, so that what the pool asks of its
// source is checked, not only what it reports.
#include "pstar/memory/exact_size_pool.h"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/base/error.h"

namespace pstar::memory {
namespace {

// malloc'd memory, with a log of the pool's calls and failures to order.
struct RecordingSource {
  static inline std::map<void*, int64_t> live;  // allocated and not released: address -> bytes
  static inline int64_t allocations = 0, releases = 0;
  static inline int64_t last_reserved = -1;  // what the pool said it held at the last allocation
  static inline bool fail_allocation = false;
  static inline int64_t fail_release_after = -1;  // release throws once this many more succeeded

  static void reset() {
    live.clear();
    allocations = releases = 0;
    last_reserved = -1;
    fail_allocation = false;
    fail_release_after = -1;
  }

  static void* allocate(int64_t bytes, int64_t reserved_bytes) {
    last_reserved = reserved_bytes;
    PSTAR_CHECK(!fail_allocation, OutOfMemoryError, "no memory for ", bytes, " bytes (",
                reserved_bytes, " held)");
    void* p = std::malloc(static_cast<size_t>(bytes));
    live[p] = bytes;
    ++allocations;
    return p;
  }

  static void release(void* p, int64_t bytes) {
    if (fail_release_after == 0) {
      fail_release_after = -1;
      PSTAR_THROW(IoError, "the source refused to take back ", bytes, " bytes");
    }
    if (fail_release_after > 0) --fail_release_after;
    const auto it = live.find(p);
    ASSERT_NE(it, live.end()) << "released memory the source did not hand out";
    EXPECT_EQ(it->second, bytes) << "released with another size than allocated";
    live.erase(it);
    ++releases;
    std::free(p);
  }
};

using Pool = ExactSizePool<RecordingSource>;
using Block = Pool::Block;

class ExactSizePoolTest : public ::testing::Test {
 protected:
  void SetUp() override { RecordingSource::reset(); }
  void TearDown() override {
    EXPECT_TRUE(RecordingSource::live.empty()) << "memory the pool never gave back";
    for (const auto& [p, bytes] : RecordingSource::live) std::free(p);
  }
};

TEST(ExactSizeFreeList, TakesTheBlockOfItsExactSizeFreedLast) {
  ExactSizeFreeList list;
  int a = 0, b = 0, c = 0;
  EXPECT_EQ(list.take(100), nullptr) << "nothing free yet";
  for (int i = 0; i < 3; ++i) list.add_in_use(100);
  list.add_in_use(200);
  ASSERT_TRUE(list.put(&a, 100));
  ASSERT_TRUE(list.put(&b, 100));
  ASSERT_TRUE(list.put(&c, 200));
  PoolStats s = list.stats();
  EXPECT_EQ(s.blocks, 4);
  EXPECT_EQ(s.free_blocks, 3);
  EXPECT_EQ(s.reserved.current, 500);
  EXPECT_EQ(s.in_use.current, 100);
  EXPECT_EQ(list.take(150), nullptr) << "no size is rounded";
  EXPECT_EQ(list.take(100), &b) << "the one freed last";
  EXPECT_EQ(list.take(100), &a);
  EXPECT_EQ(list.take(100), nullptr);
  s = list.stats();
  EXPECT_EQ(s.free_blocks, 1);
  EXPECT_EQ(s.in_use.current, 300);
  EXPECT_EQ(s.in_use.allocated, 500 + 200) << "four fresh blocks and two handed out again";
  std::vector<std::pair<void*, int64_t>> released;
  EXPECT_EQ(list.release_all([&](void* p, int64_t bytes) { released.emplace_back(p, bytes); }),
            200);
  EXPECT_EQ(released, (std::vector<std::pair<void*, int64_t>>{{&c, 200}}));
  s = list.stats();
  EXPECT_EQ(s.blocks, 3);
  EXPECT_EQ(s.free_blocks, 0);
  EXPECT_EQ(s.reserved.current, 300);
  EXPECT_EQ(s.reserved.freed, 200);
  EXPECT_EQ(list.release_all([](void*, int64_t) { FAIL() << "nothing is free"; }), 0);
}

TEST(ExactSizeFreeList, SaysWhichBlocksWereNeverInUse) {
  ExactSizeFreeList list;
  int fresh = 0, used = 0;
  list.add_free(&fresh, 100);  // reserved: fresh from the source
  list.add_in_use(100);
  ASSERT_TRUE(list.put(&used, 100));
  bool untouched = true;
  EXPECT_EQ(list.take(100, &untouched), &used);
  EXPECT_FALSE(untouched) << "a block that was in use holds its last holder's bytes";
  EXPECT_EQ(list.take(100, &untouched), &fresh);
  EXPECT_TRUE(untouched) << "a reserved block was never handed out";
  ASSERT_TRUE(list.put(&fresh, 100));
  EXPECT_EQ(list.take(100, &untouched), &fresh);
  EXPECT_FALSE(untouched) << "once handed out, a reserved block is used";
  ASSERT_TRUE(list.put(&fresh, 100));
  ASSERT_TRUE(list.put(&used, 100));
  EXPECT_EQ(list.release_all([](void*, int64_t) {}), 200);
}

TEST_F(ExactSizePoolTest, BlocksSayWhetherTheyComeUntouchedFromTheSource) {
  Pool pool;
  pool.reserve(64, 1, 1);
  Block reserved = pool.acquire(64);
  Block fresh = pool.acquire(64);
  EXPECT_TRUE(reserved.untouched());
  EXPECT_TRUE(fresh.untouched());
  void* const first = fresh.data();
  fresh.reset();
  EXPECT_FALSE(fresh.untouched()) << "an empty block";
  Block again = pool.acquire(64);
  EXPECT_EQ(again.data(), first);
  EXPECT_FALSE(again.untouched()) << "handed out a second time";
  Block moved = std::move(again);
  EXPECT_FALSE(moved.untouched());
  Block moved_fresh = std::move(reserved);
  EXPECT_TRUE(moved_fresh.untouched()) << "moving a block keeps what it says";
  EXPECT_FALSE(reserved.untouched());  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST_F(ExactSizePoolTest, ReusesExactSizesAndAsksTheSourceOnlyForNewOnes) {
  Pool pool;
  Block a = pool.acquire(1000);
  Block b = pool.acquire(3000);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a.bytes(), 1000);
  EXPECT_EQ(RecordingSource::allocations, 2);
  EXPECT_EQ(RecordingSource::last_reserved, 1000) << "the source is told what the pool holds";
  void* const first = a.data();
  a.reset();
  EXPECT_FALSE(a);
  EXPECT_EQ(RecordingSource::releases, 0) << "a freed block stays in the pool";
  Block other = pool.acquire(999);
  EXPECT_NE(other.data(), first);
  Block again = pool.acquire(1000);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(RecordingSource::allocations, 3);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.reserved.current, 4999);
  EXPECT_EQ(s.in_use.current, 4999);
  EXPECT_EQ(s.blocks, 3);
  EXPECT_EQ(s.free_blocks, 0);
  EXPECT_FALSE(pool.acquire(0)) << "an empty block for 0 bytes";
  EXPECT_EQ(RecordingSource::allocations, 3);
  EXPECT_THROW(pool.acquire(-1), InternalError);
}

TEST_F(ExactSizePoolTest, MovedBlocksComeBackOnce) {
  Pool pool;
  Block a = pool.acquire(64);
  Block b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(pool.stats().in_use.current, 64);
  Block c = pool.acquire(128);
  c = std::move(b);  // c's own block comes back, b's is now c's
  PoolStats s = pool.stats();
  EXPECT_EQ(s.in_use.current, 64);
  EXPECT_EQ(s.free_blocks, 1);
  c.reset();
  c.reset();
  s = pool.stats();
  EXPECT_EQ(s.in_use.current, 0);
  EXPECT_EQ(s.free_blocks, 2);
  EXPECT_EQ(s.in_use.freed, 64 + 128);
}

TEST_F(ExactSizePoolTest, AFailedAllocationChangesNothing) {
  Pool pool;
  Block held = pool.acquire(500);
  RecordingSource::fail_allocation = true;
  try {
    pool.acquire(700);
    FAIL() << "the source's failure was swallowed";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("no memory for 700 bytes (500 held)"), std::string::npos)
        << e.what();
  }
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.reserved.current, 500);
  EXPECT_EQ(s.in_use.current, 500);
  EXPECT_EQ(s.blocks, 1);
  // A free block of the size asked needs no source.
  held.reset();
  EXPECT_TRUE(pool.acquire(500));
}

TEST_F(ExactSizePoolTest, ReleaseFreeGivesBackOnlyFreeBlocksAndSurvivesASourceError) {
  Pool pool;
  Block kept = pool.acquire(300);
  for (int64_t bytes : {100, 100, 200}) (void)pool.acquire(bytes);  // freed at once
  Block x = pool.acquire(100), y = pool.acquire(100), z = pool.acquire(200);
  x.reset();
  y.reset();
  z.reset();
  EXPECT_EQ(pool.stats().free_blocks, 3);
  // The source fails on the second block: the first is given back and uncounted, the rest stay.
  RecordingSource::fail_release_after = 1;
  EXPECT_THROW(pool.release_free(), IoError);
  PoolStats s = pool.stats();
  EXPECT_EQ(RecordingSource::releases, 1);
  EXPECT_EQ(s.free_blocks, 2);
  EXPECT_EQ(s.blocks, 3);
  EXPECT_TRUE(s.reserved.freed == 100 || s.reserved.freed == 200) << s.reserved.freed;
  EXPECT_EQ(s.reserved.current, 700 - s.reserved.freed);
  // Tried again, the rest goes.
  EXPECT_EQ(pool.release_free(), 400 - s.reserved.freed);
  s = pool.stats();
  EXPECT_EQ(s.reserved.current, 300);
  EXPECT_EQ(s.blocks, 1);
  EXPECT_EQ(s.free_blocks, 0);
  EXPECT_EQ(RecordingSource::releases, 3);
  kept.reset();
  EXPECT_EQ(pool.release_free(), 300);
  EXPECT_EQ(RecordingSource::releases, RecordingSource::allocations);
}

TEST_F(ExactSizePoolTest, BlocksOutliveThePoolAndEverythingGoesBackAtTheEnd) {
  Block survivor;
  {
    Pool pool;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&pool, t] {
        for (int i = 0; i < 200; ++i) {
          Block b = pool.acquire(64 * (1 + (i + t) % 3));
          static_cast<unsigned char*>(b.data())[0] = static_cast<unsigned char>(i);
        }
      });
    }
    for (auto& th : threads) th.join();
    const PoolStats s = pool.stats();
    EXPECT_EQ(s.in_use.current, 0);
    EXPECT_EQ(s.free_blocks, s.blocks);
    EXPECT_LE(s.blocks, 4 * 3) << "at most one block per size per thread at once";
    survivor = pool.acquire(64);
  }
  EXPECT_EQ(RecordingSource::releases, 0) << "the survivor keeps the pool's memory alive";
  static_cast<unsigned char*>(survivor.data())[63] = 1;
  survivor.reset();
  EXPECT_EQ(RecordingSource::releases, RecordingSource::allocations);
}

// Note [parallel release]: a source that hands out addresses it never maps (the pool never touches
// a block's memory), records each release and the thread that made it, and refuses one.
struct SharedSource {
  static inline std::mutex mutex;
  static inline uintptr_t next = 0x10000;
  static inline std::map<void*, int64_t> released;
  static inline std::set<std::thread::id> threads;
  static inline void* refuse = nullptr;
  static inline int64_t allocations = 0;
  static inline int64_t allocations_left = -1;  // then allocation fails; -1: never
  static inline std::set<std::thread::id> allocating_threads;

  static void* allocate(int64_t bytes, int64_t) {
    const std::lock_guard<std::mutex> lock(mutex);
    PSTAR_CHECK(allocations_left != 0, OutOfMemoryError, "no more blocks of ", bytes);
    if (allocations_left > 0) --allocations_left;
    ++allocations;
    allocating_threads.insert(std::this_thread::get_id());
    void* p = reinterpret_cast<void*>(next);
    next += static_cast<uintptr_t>(bytes) + 4096;
    return p;
  }
  static void release(void* p, int64_t bytes) {
    // Long enough that the other threads take blocks meanwhile.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::lock_guard<std::mutex> lock(mutex);
    if (p == refuse) PSTAR_THROW(IoError, "refused");
    EXPECT_EQ(released.count(p), 0u) << "released twice";
    released[p] = bytes;
    threads.insert(std::this_thread::get_id());
  }
};

TEST(ExactSizePoolParallelRelease, ALargePoolGoesBackOverSeveralThreadsEachBlockOnce) {
  if (std::thread::hardware_concurrency() < 2)
    GTEST_SKIP() << "one core: the release runs on one thread by design";
  SharedSource::released.clear();
  SharedSource::threads.clear();
  std::map<void*, int64_t> handed_out;
  {
    ExactSizePool<SharedSource> pool;
    std::vector<PoolBlock<SharedSource>> blocks;
    for (int i = 0; i < 8; ++i) {
      blocks.push_back(pool.acquire(i % 2 == 0 ? (int64_t{64} << 20) : (int64_t{48} << 20)));
      handed_out[blocks.back().data()] = blocks.back().bytes();
    }
    SharedSource::refuse = blocks[3].data();  // skipped, and the others still go back
    handed_out.erase(blocks[3].data());
  }  // blocks first, then the pool: its state gives everything back
  EXPECT_EQ(SharedSource::released, handed_out);
  EXPECT_GT(SharedSource::threads.size(), 1u) << "448 MiB went back on one thread";
  SharedSource::refuse = nullptr;
}

TEST(ExactSizePoolParallelRelease, ASmallPoolGoesBackOnTheCallingThread) {
  SharedSource::released.clear();
  SharedSource::threads.clear();
  {
    ExactSizePool<SharedSource> pool;
    auto a = pool.acquire(1 << 20), b = pool.acquire(2 << 20);
  }
  EXPECT_EQ(SharedSource::released.size(), 2u);
  ASSERT_EQ(SharedSource::threads.size(), 1u);
  EXPECT_EQ(*SharedSource::threads.begin(), std::this_thread::get_id());
}

// Note [reserved blocks]: count blocks made at once over several threads, each then taken by a
// request of its size without asking the source again.
TEST(ExactSizePoolReserve, MakesTheBlocksOverThreadsAndKeepsThemForRequestsOfTheirSize) {
  SharedSource::allocations = 0;
  SharedSource::allocating_threads.clear();
  ExactSizePool<SharedSource> pool;
  int wrapped = 0;
  std::mutex wrapped_mutex;
  pool.reserve(1 << 20, 6, 3, [&](const std::function<void()>& work) {
    {
      const std::lock_guard<std::mutex> lock(wrapped_mutex);
      ++wrapped;
    }
    work();
  });
  EXPECT_EQ(wrapped, 3) << "every thread's work goes through the wrapper";
  EXPECT_EQ(SharedSource::allocations, 6);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.reserved.current, 6 << 20);
  EXPECT_EQ(s.blocks, 6);
  EXPECT_EQ(s.free_blocks, 6);
  EXPECT_EQ(s.in_use.current, 0);
  std::vector<PoolBlock<SharedSource>> taken;
  for (int i = 0; i < 6; ++i) taken.push_back(pool.acquire(1 << 20));
  EXPECT_EQ(SharedSource::allocations, 6) << "a request did not take a reserved block";
  EXPECT_EQ(pool.stats().free_blocks, 0);
  auto other = pool.acquire(2 << 20);  // another size: fresh
  EXPECT_EQ(SharedSource::allocations, 7);
}

TEST(ExactSizePoolReserve, AFailureKeepsTheBlocksMadeAndSaysWhy) {
  SharedSource::allocations = 0;
  SharedSource::allocations_left = 2;
  ExactSizePool<SharedSource> pool;
  EXPECT_THROW(pool.reserve(4096, 5, 2), OutOfMemoryError);
  SharedSource::allocations_left = -1;
  EXPECT_EQ(pool.stats().free_blocks, 2);
  EXPECT_EQ(pool.stats().reserved.current, 2 * 4096);
  pool.reserve(4096, 0, 4);  // nothing asked, nothing made
  EXPECT_EQ(SharedSource::allocations, 2);
}

}  // namespace
}  // namespace pstar::memory
