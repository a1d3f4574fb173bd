// The CUDA tier's communication stream (Note [communication stream] in pstar/tier/device_tier.h):
// work another thread queues in a scope waits for the compute stream's mark, and finish() returns
// once that work has completed, so that the driving thread may read its results with no wait of
// its own on the device. Each test keeps one stream busy with matrix products first, so that a
// missing wait would let the other stream's work run too early and leave zeros behind.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "pstar/tier/device_tier.h"

namespace pstar::tier {
namespace {

constexpr int64_t kElements = int64_t{1} << 20;

class CudaCommStream : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_tier_built())
      GTEST_SKIP() << "this build has no CUDA device tier (it needs a CUDA LibTorch; docs/cuda.md)";
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is usable here";
    const char* off = std::getenv("PSTAR_COMM_STREAM");
    if (off != nullptr && std::strcmp(off, "0") == 0)
      GTEST_SKIP() << "PSTAR_COMM_STREAM=0 switches the communication stream off";
    tier_ = make_cuda_tier(0, int64_t{64} << 20);
    x_ = tier_->allocate(Side::kDevice, kElements * 4);
    y_ = tier_->allocate(Side::kDevice, kElements * 4);
  }

  at::Tensor view(const Block& block) const {
    return tier_->view(block, c10::kFloat, 0, {kElements});
  }

  // Queues about 0.1 s of matrix products on the calling thread's current stream.
  static void keep_busy() {
    at::Tensor a = torch::randn({4096, 4096}, torch::TensorOptions().device(torch::kCUDA, 0));
    for (int i = 0; i < 40; ++i) a = torch::mm(a, a) / 64.0;
  }

  std::unique_ptr<DeviceTier> tier_;
  Block x_, y_;
};

TEST_F(CudaCommStream, WorkInAScopeWaitsForTheMarkOfTheComputeStream) {
  keep_busy();
  view(x_).fill_(2.0F);  // the collective's input, written on the compute stream
  const std::shared_ptr<const StreamMark> mark = tier_->mark_compute();
  ASSERT_NE(mark, nullptr);
  std::thread comm([&] {
    const std::unique_ptr<CommStreamScope> scope = tier_->enter_comm_stream(mark.get());
    ASSERT_NE(scope, nullptr);
    view(y_).copy_(view(x_));
    scope->finish();
  });
  comm.join();
  EXPECT_TRUE(torch::all(view(y_).cpu() == 2.0F).item<bool>());
}

TEST_F(CudaCommStream, FinishReturnsOnceTheScopesWorkHasCompleted) {
  const std::shared_ptr<const StreamMark> mark = tier_->mark_compute();
  std::thread comm([&] {
    const std::unique_ptr<CommStreamScope> scope = tier_->enter_comm_stream(mark.get());
    ASSERT_NE(scope, nullptr);
    keep_busy();           // on the communication stream
    view(y_).fill_(3.0F);  // the collective's result
    scope->finish();
  });
  comm.join();
  // Read through the compute stream, which waits for nothing of the communication stream's.
  EXPECT_TRUE(torch::all(view(y_).cpu() == 3.0F).item<bool>());
}

}  // namespace
}  // namespace pstar::tier
