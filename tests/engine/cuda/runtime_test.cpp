// pstar_cuda's runtime owners on a device: the device query, DeviceArena over a real cudaMalloc,
// PinnedHostPool's exact sizes and reuse, and asynchronous copies ordered by events across two
// streams. Needs a GPU; skipped without.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "pstar/base/error.h"
#include "pstar/cuda/device.h"
#include "pstar/cuda/memory.h"
#include "pstar/cuda/stream.h"

namespace pstar::cuda::test {
namespace {

class CudaRuntimeTest : public CudaDeviceTest {};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(CudaRuntimeTest, DescribesTheDevice) {
  const DeviceInfo info = device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_capability_major, 7);  // CUDA 13 runs on sm_75 and newer
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory_bytes, 0);
  EXPECT_GT(info.peak_memory_bandwidth_bytes_per_s, 0.0);
  const std::string text = describe_device(0);
  EXPECT_TRUE(contains(text, info.name)) << text;
  EXPECT_TRUE(contains(text, "device 0, sm_")) << text;
  std::printf("%s\n", text.c_str());
  EXPECT_EQ(current_device(), 0);
  EXPECT_THROW(set_device(device_count()), ConfigError);
}

TEST_F(CudaRuntimeTest, ReportsFreeMemoryAndKeepsTheCurrentDevice) {
  const MemoryInfo before = memory_info(0);
  EXPECT_GT(before.free_bytes, 0);
  EXPECT_LE(before.free_bytes, before.total_bytes);
  {
    DeviceArena arena(64 << 20);
    EXPECT_LE(memory_info(0).free_bytes, before.free_bytes - (64 << 20));
  }
  EXPECT_EQ(current_device(), 0);
  EXPECT_THROW(memory_info(device_count()), ConfigError);
}

TEST_F(CudaRuntimeTest, ArenaAllocatesFreesAndCoalesces) {
  DeviceArena arena(1 << 20);
  EXPECT_EQ(arena.capacity_bytes(), 1 << 20);
  EXPECT_NE(arena.base(), nullptr);
  DeviceBlock a = arena.allocate(1000);
  DeviceBlock b = arena.allocate(256 << 10);
  DeviceBlock c = arena.allocate(100);
  EXPECT_EQ(a.bytes(), 1000);
  EXPECT_EQ(arena.bytes_in_use(), 1024 + (256 << 10) + 256);
  EXPECT_EQ(a.data(), arena.base());
  for (const DeviceBlock* block : {&a, &b, &c}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block->data()) % 256, 0u);
  }
  // The memory is usable: fill b, read it back.
  Stream stream;
  memset_async(b.data(), 0x5A, b.bytes(), stream);
  std::vector<uint8_t> back(static_cast<size_t>(b.bytes()));
  copy_d2h_async(back.data(), b.data(), b.bytes(), stream);
  stream.synchronize();
  EXPECT_EQ(std::count(back.begin(), back.end(), 0x5A), b.bytes());

  b.reset();
  a.reset();  // joins the hole b left: one range at the front, one at the back
  EXPECT_EQ(arena.free_range_count(), 2);
  EXPECT_EQ(arena.largest_free_bytes(), (1 << 20) - 1024 - (256 << 10) - 256);
  try {
    arena.allocate(1 << 20);
    FAIL() << "a full-capacity block should not fit while c is held";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cannot allocate 1.00 MiB (1048576 bytes)")) << what;
    EXPECT_TRUE(contains(what, "free of 1.00 MiB in 2 free ranges, the largest")) << what;
  }
  c.reset();
  EXPECT_EQ(arena.free_range_count(), 1);
  EXPECT_EQ(arena.bytes_in_use(), 0);
  DeviceBlock whole = arena.allocate(1 << 20);
  EXPECT_EQ(whole.data(), arena.base());
}

TEST_F(CudaRuntimeTest, ArenaLargerThanTheDeviceIsAnOutOfMemoryError) {
  try {
    DeviceArena arena(int64_t{1} << 50);
    FAIL() << "a 1 PiB arena should not fit";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cudaMalloc of 1024.00 TiB for a device arena")) << what;
    EXPECT_TRUE(contains(what, "out of memory (cudaErrorMemoryAllocation)")) << what;
  }
  // The failure left no error behind for the next call to report.
  Stream stream;
  DeviceArena small(1 << 16);
  DeviceBlock block = small.allocate(4096);
  memset_async(block.data(), 0, block.bytes(), stream);
  EXPECT_NO_THROW(stream.synchronize());
}

TEST_F(CudaRuntimeTest, BlocksKeepTheirArenaAlive) {
  DeviceBlock block;
  {
    DeviceArena arena(1 << 20);
    block = arena.allocate(4096);
  }
  Stream stream;
  memset_async(block.data(), 1, block.bytes(), stream);
  EXPECT_NO_THROW(stream.synchronize());
  block.reset();
}

TEST_F(CudaRuntimeTest, PinnedPoolReservesExactSizesAndReusesThem) {
  PinnedHostPool pool;
  PinnedBlock a = pool.acquire(1000);
  PinnedBlock b = pool.acquire(3000);
  PinnedBlock c = pool.acquire(1000);
  EXPECT_EQ(pool.stats().reserved.current, 5000);  // the sum of the sizes asked for: no rounding
  EXPECT_EQ(pool.stats().in_use.current, 5000);
  EXPECT_EQ(pool.stats().blocks, 3);
  std::memset(a.data(), 1, 1000);  // host memory, usable directly
  void* const a_data = a.data();
  a.reset();
  EXPECT_EQ(pool.stats().in_use.current, 4000);
  EXPECT_EQ(pool.stats().reserved.current, 5000);
  EXPECT_EQ(pool.stats().free_blocks, 1);
  PinnedBlock again = pool.acquire(1000);  // the freed block, not a new one
  EXPECT_EQ(again.data(), a_data);
  EXPECT_EQ(pool.stats().reserved.current, 5000);
  PinnedBlock other = pool.acquire(999);  // another size: a new block of exactly 999 bytes
  EXPECT_EQ(pool.stats().reserved.current, 5999);
  EXPECT_EQ(pool.stats().blocks, 4);
  EXPECT_EQ(pool.release_free(), 0);
  b.reset();
  other.reset();
  EXPECT_EQ(pool.release_free(), 3999);
  EXPECT_EQ(pool.stats().reserved.current, 2000);
  EXPECT_EQ(pool.stats().in_use.current, 2000);
  EXPECT_EQ(pool.stats().blocks, 2);
  EXPECT_EQ(pool.acquire(0).data(), nullptr);
}

// h2d on one stream, then (after an event) d2d and d2h on another; the bytes come back unchanged,
// and the events time it.
TEST_F(CudaRuntimeTest, AsyncCopiesRoundTripInEventOrder) {
  const int64_t bytes = (8 << 20) + 3;  // odd, to show nothing assumes whole words
  PinnedHostPool pool;
  PinnedBlock src = pool.acquire(bytes);
  PinnedBlock dst = pool.acquire(bytes);
  std::mt19937 rng(1);
  for (int64_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(src.data())[i] = rng() & 0xFF;
  std::memset(dst.data(), 0, static_cast<size_t>(bytes));
  DeviceArena arena(32 << 20);
  DeviceBlock first = arena.allocate(bytes);
  DeviceBlock second = arena.allocate(bytes);
  Stream upload, download;
  Event start, uploaded(/*timing=*/false), end;
  start.record(upload);
  copy_h2d_async(first.data(), src.data(), bytes, upload);
  uploaded.record(upload);
  uploaded.wait(download);
  copy_d2d_async(second.data(), first.data(), bytes, download);
  copy_d2h_async(dst.data(), second.data(), bytes, download);
  end.record(download);
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_TRUE(download.query());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), static_cast<size_t>(bytes)), 0);
  EXPECT_GE(Event::elapsed_ms(start, end), 0.0f);
  EXPECT_THROW(Event::elapsed_ms(start, uploaded), InternalError);  // no timing
  EXPECT_NO_THROW(copy_h2d_async(first.data(), src.data(), 0, upload));
  EXPECT_THROW(copy_h2d_async(nullptr, src.data(), 16, upload), ConfigError);
}

// A query of unfinished work answers false and leaves no error behind: the runtime sets the
// thread's last error to cudaErrorNotReady, and a launch check after it would throw for a kernel
// that launched fine (issue 20, item 1).
TEST_F(CudaRuntimeTest, NotReadyQueriesLeaveNoLastError) {
  const int64_t bytes = int64_t{256} << 20;
  PinnedHostPool pool;
  PinnedBlock src = pool.acquire(bytes);
  DeviceArena arena(bytes);
  DeviceBlock dst = arena.allocate(bytes);
  Stream stream;
  // Several copies of 256 MiB: tens of milliseconds at PCIe speed, far longer than the query.
  for (int i = 0; i < 8; ++i) copy_h2d_async(dst.data(), src.data(), bytes, stream);
  Event done(/*timing=*/false);
  done.record(stream);
  EXPECT_FALSE(done.query());
  EXPECT_FALSE(stream.query());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  done.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_TRUE(stream.query());
}

TEST_F(CudaRuntimeTest, MovedFromStreamsAreRefused) {
  Stream a;
  Stream b = std::move(a);
  EXPECT_NO_THROW(b.synchronize());
  EXPECT_THROW(a.synchronize(), InternalError);  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace pstar::cuda::test
