// grad_sq_sum's checks, scratch and final sum over blocks, on the host. Compiled with host Adam's
// -ffp-contract=off (sources.cmake), as its sum over blocks is.
#include "pstar/cuda/sq_sum.h"

#include <cuda_runtime.h>

#include <atomic>
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
// Device bytes every thread's scratch holds now (for the tier's footprint, Note [device
// footprint]).
std::atomic<int64_t> scratch_total{0};

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
      scratch_total += bytes;
      data_ = std::unique_ptr<double, Free>(static_cast<double*>(p), Free{device, bytes});
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
    int64_t bytes = 0;
    void operator()(double* p) const {
      scratch_total -= bytes;
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

// optim::grad_sq_sum's checks, in its order, plus alignment. Returns whether there is anything
// to sum.
bool check_job(const void* grad, optim::GradType grad_type, int64_t numel) {
  PSTAR_CHECK(numel >= 0, ConfigError, "CUDA grad_sq_sum: numel must be >= 0, got ", numel);
  PSTAR_CHECK(valid(grad_type), ConfigError, "CUDA grad_sq_sum: invalid grad_type ",
              static_cast<int>(grad_type));
  if (numel == 0) return false;
  const uintptr_t elem_bytes = grad_type == optim::GradType::kF32 ? 4 : 2;
  PSTAR_CHECK(grad != nullptr, ConfigError, "CUDA grad_sq_sum: grad (",
              grad_type == optim::GradType::kF32    ? "f32"
              : grad_type == optim::GradType::kBF16 ? "bf16"
                                                    : "f16",
              ") must not be null");
  PSTAR_CHECK(reinterpret_cast<uintptr_t>(grad) % elem_bytes == 0, ConfigError,
              "CUDA grad_sq_sum: grad is not aligned to its element size (", elem_bytes, " bytes)");
  return true;
}

// The scratch of the calling thread's sums (see BlockSumScratch).
BlockSumScratch& thread_scratch() {
  thread_local BlockSumScratch scratch;
  return scratch;
}

}  // namespace

double grad_sq_sum_on_grid(const void* grad, optim::GradType grad_type, int64_t numel,
                           int64_t max_ctas, CUstream_st* stream) {
  if (!check_job(grad, grad_type, numel)) return 0.0;
  PSTAR_CHECK(max_ctas >= 1, ConfigError, "CUDA grad_sq_sum: max_ctas must be >= 1, got ",
              max_ctas);

  const int64_t blocks = sq_sum_block_count(numel);
  double* device_sums = thread_scratch().get(blocks);
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

void grad_sq_sums(const SqSumJob* jobs, int64_t count, double* out, CUstream_st* stream) {
  using namespace detail;
  PSTAR_CHECK(count >= 0 && (count == 0 || (jobs != nullptr && out != nullptr)), ConfigError,
              "CUDA grad_sq_sums: ", count, " jobs need non-null jobs and out");
  // Every job's block sums side by side in one scratch: first[i] is job i's first block.
  std::vector<int64_t> first(static_cast<size_t>(count) + 1, 0);
  for (int64_t i = 0; i < count; ++i) {
    const SqSumJob& job = jobs[i];
    const int64_t blocks =
        check_job(job.grad, job.grad_type, job.numel) ? sq_sum_block_count(job.numel) : 0;
    first[static_cast<size_t>(i) + 1] = first[static_cast<size_t>(i)] + blocks;
  }
  const int64_t total = first.back();
  for (int64_t i = 0; i < count; ++i) out[i] = 0.0;
  if (total == 0) return;
  double* device_sums = thread_scratch().get(total);
  std::vector<double> block_sums(static_cast<size_t>(total));
  DrainOnError drain(stream);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t at = first[static_cast<size_t>(i)];
    if (first[static_cast<size_t>(i) + 1] == at) continue;
    launch_sq_sum(jobs[i].grad, jobs[i].grad_type, jobs[i].numel, device_sums + at, kSqSumMaxCtas,
                  stream);
  }
  const int64_t bytes = total * static_cast<int64_t>(sizeof(double));
  PSTAR_CUDA_CHECK(cudaMemcpyAsync(block_sums.data(), device_sums, static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToHost, stream),
                   "copying ", total, " block sums of ", count,
                   " gradient sums of squares to the host");
  PSTAR_CUDA_CHECK(cudaStreamSynchronize(stream),
                   "cudaStreamSynchronize after the gradient sums of squares");
  drain.disarm();
  // Note [cuda grad sq sum order]: each job's block sums in block order, as the host adds them.
  for (int64_t i = 0; i < count; ++i) {
    const int64_t at = first[static_cast<size_t>(i)];
    const int64_t blocks = first[static_cast<size_t>(i) + 1] - at;
    if (blocks > 0) out[i] = sq_sum_blocks(block_sums.data() + at, blocks);
  }
}

int64_t sq_sum_scratch_bytes() { return detail::scratch_total.load(); }

double grad_sq_sum(const void* grad, optim::GradType grad_type, int64_t numel,
                   CUstream_st* stream) {
  return detail::grad_sq_sum_on_grid(grad, grad_type, numel, detail::kSqSumMaxCtas, stream);
}

double grad_sq_sum(const void* grad, optim::GradType grad_type, int64_t numel, Stream& stream) {
  return grad_sq_sum(grad, grad_type, numel, stream.native());
}

}  // namespace pstar::cuda
