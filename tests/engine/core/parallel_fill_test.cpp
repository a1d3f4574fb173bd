// parallel_zero (Note [parallel first touch]): exactly the bytes asked, on several threads.
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

}  // namespace
}  // namespace pstar::core
