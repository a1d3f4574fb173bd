// grad_sq_sum's checks, scratch and final sum over blocks, on the host. Compiled with host Adam's
// -ffp-contract=off (sources.cmake), as its sum over blocks is.
#include "pstar/cuda/sq_sum.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "check.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/cuda/stream.h"
#include "sq_sum_element.h"
#include "sq_sum_launch.h"

namespace pstar::cuda {
namespace detail {
namespace {

// The kernel's block sums go to a device scratch cached per thread, for the current device, and
// grown to the largest buffer seen (from 4096 blocks: 256M elements, 32 KiB). Every call returns
// only after its stream has drained, so one thread's calls never overlap on it. Not
// cudaMallocAsync per call: the default memory pool gives its memory back at every synchronize
// (release threshold 0), so each call would map and unmap device memory, and raising that
// threshold is a process-wide setting that belongs to LibTorch or the engine, not to this call.
class BlockSumScratch {
 public:
  double* get(int64_t blocks) {
    int device = 0;
    PSTAR_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
    if (data_ == nullptr || device_ != device || capacity_ < blocks) {
      data_.reset();
      const int64_t capacity = blocks > kMinBlocks ? blocks : kMinBlocks;
      const int64_t bytes = capacity * static_cast<int64_t>(sizeof(double));
      void* p = nullptr;
      PSTAR_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)), "cudaMalloc of ",
                       format_bytes(bytes), " for the gradient sum of squares on device ", device);
      data_ = std::unique_ptr<double, Free>(static_cast<double*>(p), Free{device});
      device_ = device;
      capacity_ = capacity;
    }
    return data_.get();
  }

 private:
  static constexpr int64_t kMinBlocks = 4096;
  // Frees on the device it was allocated on. Errors are ignored: at process exit the runtime may
  // be gone already, and the memory with it.
  struct Free {
    int device = 0;
    void operator()(double* p) const {
      int current = 0;
      const bool switch_device = cudaGetDevice(&current) == cudaSuccess && current != device;
      if (switch_device) (void)cudaSetDevice(device);
      (void)cudaFree(p);
      if (switch_device) (void)cudaSetDevice(current);
    }
  };
  std::unique_ptr<double, Free> data_{nullptr, Free{}};
  int device_ = -1;
  int64_t capacity_ = 0;
};

// If a call throws with the kernel or the copy queued, waits for them, so that the next call on
// another stream cannot race them on the scratch.
class DrainOnError {
 public:
  explicit DrainOnError(cudaStream_t stream) : stream_(stream) {}
  ~DrainOnError() {
    if (armed_) (void)cudaStreamSynchronize(stream_);
  }
  DrainOnError(const DrainOnError&) = delete;
  DrainOnError& operator=(const DrainOnError&) = delete;
  void disarm() { armed_ = false; }

 private:
  cudaStream_t stream_;
  bool armed_ = true;
};

bool valid(optim::GradType type) {
  return type == optim::GradType::kF32 || type == optim::GradType::kBF16 ||
         type == optim::GradType::kF16;
}

}  // namespace

double grad_sq_sum_on_grid(const void* grad, optim::GradType grad_type, int64_t numel,
                           int64_t max_ctas, CUstream_st* stream) {
  // optim::grad_sq_sum's checks, in its order, plus alignment.
  PSTAR_CHECK(numel >= 0, ConfigError, "CUDA grad_sq_sum: numel must be >= 0, got ", numel);
  PSTAR_CHECK(valid(grad_type), ConfigError, "CUDA grad_sq_sum: invalid grad_type ",
              static_cast<int>(grad_type));
  if (numel == 0) return 0.0;
  const uintptr_t elem_bytes = grad_type == optim::GradType::kF32 ? 4 : 2;
  PSTAR_CHECK(grad != nullptr, ConfigError, "CUDA grad_sq_sum: grad (",
              grad_type == optim::GradType::kF32    ? "f32"
              : grad_type == optim::GradType::kBF16 ? "bf16"
                                                    : "f16",
              ") must not be null");
  PSTAR_CHECK(reinterpret_cast<uintptr_t>(grad) % elem_bytes == 0, ConfigError,
              "CUDA grad_sq_sum: grad is not aligned to its element size (", elem_bytes, " bytes)");
  PSTAR_CHECK(max_ctas >= 1, ConfigError, "CUDA grad_sq_sum: max_ctas must be >= 1, got ",
              max_ctas);

  thread_local BlockSumScratch scratch;
  const int64_t blocks = sq_sum_block_count(numel);
  double* device_sums = scratch.get(blocks);
  std::vector<double> block_sums(static_cast<size_t>(blocks));
  DrainOnError drain(stream);
  launch_sq_sum(grad, grad_type, numel, device_sums, max_ctas, stream);
  const int64_t bytes = blocks * static_cast<int64_t>(sizeof(double));
  PSTAR_CUDA_CHECK(cudaMemcpyAsync(block_sums.data(), device_sums, static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToHost, stream),
                   "copying ", blocks, " block sums of the gradient sum of squares to the host");
  PSTAR_CUDA_CHECK(cudaStreamSynchronize(stream),
                   "cudaStreamSynchronize after the gradient sum of squares");
  drain.disarm();
  // Note [cuda grad sq sum order]: the block sums in block order, as the host adds them.
  return sq_sum_blocks(block_sums.data(), blocks);
}

}  // namespace detail

double grad_sq_sum(const void* grad, optim::GradType grad_type, int64_t numel,
                   CUstream_st* stream) {
  return detail::grad_sq_sum_on_grid(grad, grad_type, numel, detail::kSqSumMaxCtas, stream);
}

double grad_sq_sum(const void* grad, optim::GradType grad_type, int64_t numel, Stream& stream) {
  return grad_sq_sum(grad, grad_type, numel, stream.native());
}

}  // namespace pstar::cuda
