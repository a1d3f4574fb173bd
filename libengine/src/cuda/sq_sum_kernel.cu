// The kernel of pstar::cuda::grad_sq_sum: one thread per (block, lane) of Note [cuda grad sq sum
// order] (sq_sum_element.h), which sums its lane in element order; the 16 lanes of a block are one
// half-warp, which combines them in lane order through shuffles, so the kernel writes one double
// per block of 65536 elements rather than 16. Compiled with -fmad=false -ftz=false -prec-div=true
// -prec-sqrt=true (sources.cmake).
//
// Memory access: at each step the 16 threads of a block read 16 consecutive elements (64 bytes of
// fp32, 32 of bf16/fp16), whole sectors, and each thread keeps kSqSumBatch loads in flight.
#include <cuda_runtime.h>

#include <cstdint>

#include "check.h"
#include "sq_sum_element.h"
#include "sq_sum_launch.h"

namespace pstar::cuda::detail {
namespace {

using optim::GradType;

// 4 blocks per CTA: small CTAs spread a chunk-sized buffer (a few thousand lane chains) over
// every SM.
constexpr int kThreads = 64;
static_assert(kThreads % kSqSumLanes == 0, "a block's lanes are one half-warp");

template <GradType G>
__global__ void __launch_bounds__(kThreads)
    sq_sum_kernel(const void* __restrict__ grad, int64_t numel, int64_t blocks,
                  double* __restrict__ block_sums) {
  const int64_t chains = blocks * kSqSumLanes;
  // A multiple of 16, so the 16 threads of a half-warp share one block in every iteration and
  // enter and leave the loop together.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const unsigned half_warp = 0xFFFFu << (threadIdx.x & 16u);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; t < chains;
       t += stride) {
    const int64_t block = t / kSqSumLanes;
    const int lane = static_cast<int>(t % kSqSumLanes);
    const double own = sq_sum_lane<G>(grad, numel, block, lane);
    double lanes[kSqSumLanes];
#pragma unroll
    for (int j = 0; j < kSqSumLanes; ++j) lanes[j] = __shfl_sync(half_warp, own, j, kSqSumLanes);
    const double sum = sq_sum_lanes(lanes);
    if (lane == 0) block_sums[block] = sum;
  }
}

template <GradType G>
void launch(const void* grad, int64_t numel, double* block_sums, int64_t max_ctas,
            cudaStream_t stream) {
  const int64_t blocks = sq_sum_block_count(numel);
  int64_t ctas = (blocks * kSqSumLanes + kThreads - 1) / kThreads;
  if (ctas > max_ctas) ctas = max_ctas;
  sq_sum_kernel<G>
      <<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(grad, numel, blocks, block_sums);
}

}  // namespace

void launch_sq_sum(const void* grad, GradType grad_type, int64_t numel, double* block_sums,
                   int64_t max_ctas, CUstream_st* stream) {
  switch (grad_type) {
    case GradType::kF32:
      launch<GradType::kF32>(grad, numel, block_sums, max_ctas, stream);
      break;
    case GradType::kBF16:
      launch<GradType::kBF16>(grad, numel, block_sums, max_ctas, stream);
      break;
    case GradType::kF16:
      launch<GradType::kF16>(grad, numel, block_sums, max_ctas, stream);
      break;
  }
  PSTAR_CUDA_CHECK(cudaGetLastError(), "launching the CUDA gradient sum of squares on ", numel,
                   " elements");
}

}  // namespace pstar::cuda::detail
