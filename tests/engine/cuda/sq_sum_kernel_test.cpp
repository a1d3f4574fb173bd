// The CUDA gradient sum of squares against optim::grad_sq_sum, bit for bit (Note [cuda grad sq sum
// order]): every gradient dtype, sizes around the lane row and the block, a start one element in,
// non-finite values, a grid small enough that the kernel loops, and the three ways to name a
// stream. Needs a GPU; skipped without.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "pstar/base/error.h"
#include "pstar/cuda/memory.h"
#include "pstar/cuda/sq_sum.h"
#include "pstar/cuda/stream.h"
#include "pstar/optim/host_adam.h"
#include "sq_sum_launch.h"

namespace pstar::cuda::test {
namespace {

using optim::GradType;

// A host gradient's copy on the device, `offset` elements into a block.
class DeviceGrad {
 public:
  DeviceGrad(DeviceArena& arena, GradType t, const std::vector<uint8_t>& host, int64_t offset,
             Stream& stream)
      : elem_(static_cast<int64_t>(grad_elem_bytes(t))),
        block_(arena.allocate(static_cast<int64_t>(host.size()) + (offset + 1) * elem_)),
        offset_(offset) {
    copy_h2d_async(data(), host.data(), static_cast<int64_t>(host.size()), stream);
    stream.synchronize();
  }
  void* data() const { return static_cast<char*>(block_.data()) + offset_ * elem_; }

 private:
  int64_t elem_;
  DeviceBlock block_;
  int64_t offset_;
};

class SqSumKernelTest : public CudaDeviceParamTest<GradType> {};

TEST_P(SqSumKernelTest, MatchesHostBitForBit) {
  const GradType t = GetParam();
  DeviceArena arena(64 << 20);
  Stream stream;
  for (SqSumInput input : all_sq_sum_inputs()) {
    for (int64_t n : sq_sum_sizes()) {
      if (n == 0) continue;  // RejectsBadArgumentsAndEmptyBuffers
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(name(input)) + ", numel " + std::to_string(n) + ", offset " +
                     std::to_string(offset));
        std::mt19937 rng(static_cast<uint32_t>(n * 5 + static_cast<int64_t>(input)));
        const std::vector<uint8_t> grad = sq_sum_grad(t, n, input, rng);
        const DeviceGrad device(arena, t, grad, offset, stream);
        EXPECT_TRUE(same_sq_sum(optim::grad_sq_sum(grad.data(), t, n),
                                grad_sq_sum(device.data(), t, n, stream)));
      }
    }
  }
}

// One and three CTAs: every thread loops over many (block, lane) chains.
TEST_P(SqSumKernelTest, SmallGridsMatchHost) {
  const GradType t = GetParam();
  DeviceArena arena(64 << 20);
  Stream stream;
  for (int64_t n : {int64_t{3 * 65536 + 5}, int64_t{20 * 65536 + 3}}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    const std::vector<uint8_t> grad = sq_sum_grad(t, n, SqSumInput::kRandom, rng);
    const DeviceGrad device(arena, t, grad, 1, stream);
    const double host = optim::grad_sq_sum(grad.data(), t, n);
    for (int64_t ctas : {1, 3}) {
      SCOPED_TRACE("numel " + std::to_string(n) + ", " + std::to_string(ctas) + " CTAs");
      EXPECT_TRUE(same_sq_sum(
          host, detail::grad_sq_sum_on_grid(device.data(), t, n, ctas, stream.native())));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllGradTypes, SqSumKernelTest,
                         ::testing::Values(GradType::kF32, GradType::kBF16, GradType::kF16),
                         [](const ::testing::TestParamInfo<GradType>& info) {
                           return std::string(name(info.param));
                         });

class SqSumKernelStreamTest : public CudaDeviceTest {};

// A Stream, its raw handle and the legacy default stream (nullptr) give the same bits; so do
// repeated calls, which reuse the scratch, and a smaller buffer after a larger one.
TEST_F(SqSumKernelStreamTest, EveryStreamGivesTheSameBits) {
  DeviceArena arena(64 << 20);
  Stream stream;
  Stream other;
  const int64_t n = 5 * 65536 + 77;
  std::mt19937 rng(41);
  const std::vector<uint8_t> grad = sq_sum_grad(GradType::kBF16, n, SqSumInput::kRandom, rng);
  const DeviceGrad device(arena, GradType::kBF16, grad, 0, stream);
  const double host = optim::grad_sq_sum(grad.data(), GradType::kBF16, n);
  EXPECT_TRUE(same_sq_sum(host, grad_sq_sum(device.data(), GradType::kBF16, n, stream)));
  EXPECT_TRUE(same_sq_sum(host, grad_sq_sum(device.data(), GradType::kBF16, n, other.native())));
  EXPECT_TRUE(same_sq_sum(host, grad_sq_sum(device.data(), GradType::kBF16, n, nullptr)));
  EXPECT_TRUE(same_sq_sum(optim::grad_sq_sum(grad.data(), GradType::kBF16, 17),
                          grad_sq_sum(device.data(), GradType::kBF16, 17, stream)));
}

// Issue 20, item 7: the batched sums (one wait for all) give each buffer its own call's bits, empty
// buffers among them, and check every buffer before queuing anything.
TEST_F(SqSumKernelStreamTest, BatchedSumsGiveEachBufferItsOwnBits) {
  DeviceArena arena(64 << 20);
  Stream stream;
  std::vector<DeviceGrad> device;
  std::vector<std::vector<uint8_t>> host;
  std::vector<SqSumJob> jobs;
  const GradType types[] = {GradType::kBF16, GradType::kF32, GradType::kF16, GradType::kF32};
  const int64_t sizes[] = {5 * 65536 + 77, 17, 3 * 65536, 0};
  std::mt19937 rng(43);
  for (int i = 0; i < 4; ++i) {
    host.push_back(sq_sum_grad(types[i], std::max<int64_t>(sizes[i], 1), SqSumInput::kRandom, rng));
    device.emplace_back(arena, types[i], host.back(), i % 2, stream);
  }
  for (int i = 0; i < 4; ++i) jobs.push_back(SqSumJob{device[i].data(), types[i], sizes[i]});
  std::vector<double> out(jobs.size(), -1.0);
  grad_sq_sums(jobs.data(), static_cast<int64_t>(jobs.size()), out.data(), stream.native());
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("buffer " + std::to_string(i));
    EXPECT_TRUE(same_sq_sum(optim::grad_sq_sum(host[i].data(), types[i], sizes[i]), out[i]));
    EXPECT_TRUE(same_sq_sum(grad_sq_sum(device[i].data(), types[i], sizes[i], stream), out[i]));
  }
  EXPECT_GT(sq_sum_scratch_bytes(), 0);
  // A bad job anywhere: nothing is queued, nothing written.
  jobs[2].grad = nullptr;
  std::fill(out.begin(), out.end(), -1.0);
  EXPECT_THROW(
      grad_sq_sums(jobs.data(), static_cast<int64_t>(jobs.size()), out.data(), stream.native()),
      ConfigError);
  EXPECT_EQ(out[0], -1.0);
}

TEST_F(SqSumKernelStreamTest, RejectsBadArgumentsAndEmptyBuffers) {
  DeviceArena arena(1 << 20);
  DeviceBlock block = arena.allocate(4096);
  Stream stream;
  EXPECT_EQ(grad_sq_sum(block.data(), GradType::kF32, 0, stream), 0.0);
  EXPECT_EQ(grad_sq_sum(nullptr, GradType::kF16, 0, stream), 0.0);
  EXPECT_THROW(grad_sq_sum(block.data(), GradType::kF32, -1, stream), ConfigError);
  EXPECT_THROW(grad_sq_sum(nullptr, GradType::kF32, 4, stream), ConfigError);
  EXPECT_THROW(grad_sq_sum(static_cast<char*>(block.data()) + 2, GradType::kF32, 4, stream),
               ConfigError);
  EXPECT_THROW(grad_sq_sum(static_cast<char*>(block.data()) + 1, GradType::kBF16, 4, stream),
               ConfigError);
  EXPECT_THROW(grad_sq_sum(block.data(), static_cast<GradType>(3), 4, stream), ConfigError);
  // An fp32 buffer 2 bytes in is fine as bf16.
  memset_async(block.data(), 0, 4096, stream);
  EXPECT_EQ(grad_sq_sum(static_cast<char*>(block.data()) + 2, GradType::kBF16, 4, stream), 0.0);
}

}  // namespace
}  // namespace pstar::cuda::test
