// parallel_zero (Note [parallel first touch]): exactly the bytes asked, on several threads; and
// parallel_fault_in (Note [untouched blocks]): every page of a fresh mapping resident, reading
// zeros.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/core/parallel_fill.h"

namespace pstar::core {
namespace {

TEST(ParallelFillTest, ZeroesExactlyTheBytesAskedOnSeveralThreads) {
  const int before = torch::get_num_threads();
  torch::set_num_threads(2);
  // A head up to the first huge-page boundary, 4 MiB pieces and a ragged end, inside a buffer
  // whose edges must stay as they are.
  const int64_t bytes = (int64_t{13} << 20) + 123;
  std::vector<uint8_t> buffer(static_cast<size_t>(bytes + 64), 0xAB);
  const int threads = parallel_zero(buffer.data() + 32, bytes);
  torch::set_num_threads(before);
  // A file calling at::parallel_for without -fopenmp would run it on one thread.
  EXPECT_EQ(threads, 2);
  for (int64_t i = 0; i < static_cast<int64_t>(buffer.size()); ++i) {
    const bool inside = i >= 32 && i < 32 + bytes;
    ASSERT_EQ(buffer[static_cast<size_t>(i)], inside ? 0 : 0xAB) << i;
  }
  EXPECT_EQ(parallel_zero(buffer.data(), 0), 0);
}

// How many of the pages of [data, data + bytes) are resident (mincore).
int64_t resident_pages(void* data, int64_t bytes) {
  const auto page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((static_cast<size_t>(bytes) + page - 1) / page);
  EXPECT_EQ(mincore(data, static_cast<size_t>(bytes), in.data()), 0);
  int64_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(ParallelFillTest, FaultingInAFreshMappingMakesEveryPageResidentAndZero) {
  const int before = torch::get_num_threads();
  torch::set_num_threads(2);
  const auto page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  // Not a multiple of 4 MiB nor of a page, over several pieces, in 4 KiB pages (no huge-page
  // advice) so that every page is faulted on its own.
  const int64_t bytes = (int64_t{9} << 20) + 3 * page + 100;
  const int64_t mapped = (bytes + page - 1) / page * page;
  void* data = mmap(nullptr, static_cast<size_t>(mapped), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(data, MAP_FAILED);
  (void)madvise(data, static_cast<size_t>(mapped), MADV_NOHUGEPAGE);
  EXPECT_EQ(resident_pages(data, mapped), 0) << "a fresh mapping has no pages yet";
  // A range starting inside the first page: that page is touched too.
  auto* base = static_cast<char*>(data);
  const int threads = parallel_fault_in(base + 100, bytes - 100);
  torch::set_num_threads(before);
  EXPECT_EQ(threads, 2);
  EXPECT_EQ(resident_pages(data, mapped), mapped / page) << "a page was left to be faulted later";
  for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(base[i], 0) << i;
  EXPECT_EQ(parallel_fault_in(base, 0), 0);
  ASSERT_EQ(munmap(data, static_cast<size_t>(mapped)), 0);
}

TEST(ParallelFillTest, ZeroingNewMemoryZeroesWhatWasUsedAndFaultsInWhatWasNot) {
  std::vector<uint8_t> used(1 << 20, 0xCD);
  parallel_zero_new(used.data(), static_cast<int64_t>(used.size()), /*untouched=*/false);
  for (size_t i = 0; i < used.size(); ++i) ASSERT_EQ(used[i], 0) << i;
}

}  // namespace
}  // namespace pstar::core
