// The arithmetic of the CUDA gradient sum of squares (pstar::cuda::grad_sq_sum), written once for
// the device (nvcc) and the host (any C++17 compiler), so that a machine without a GPU can check
// it against optim::grad_sq_sum.
//
// Note [cuda grad sq sum order]: the device must give the bits of optim::grad_sq_sum, whose order
// is fixed (Note [grad sq sum order] in pstar/optim/host_adam.h): blocks of kSqSumBlock elements;
// in a block, element k goes to lane k % 16 (16 double accumulators from 0.0, each in order of
// k); a block's sum is 0.0 + lane 0 + ... + lane 15; the result is the one block's sum, or 0.0 +
// block 0 + block 1 + ... Each (block, lane) chain is therefore one sequential sum, computed here
// by one device thread (sq_sum_lane); the 16 lanes of a block are combined in order
// (sq_sum_lanes), and the block sums in order on the host (sq_sum_blocks). The square of an fp32
// value is exact in double, so only the adds round, and IEEE double add is correctly rounded on
// both sides; the device spells them __dadd_rn (never contracted), and sq_sum_kernel.cu is
// compiled with -fmad=false -ftz=false besides (sources.cmake), so an fp32 denormal is converted,
// not flushed. Only NaN payloads may differ; a NaN or infinity is one on both sides.
//
// The host side of this file serves tests (tests/engine/cuda/sq_sum_emulation_test.cpp) and the
// host's final sum over blocks (sq_sum.cpp).
#pragma once

#include <cstdint>

#include "adam_element.h"
#include "pstar/optim/float_bits.h"
#include "pstar/optim/host_adam.h"

#if defined(__CUDA_ARCH__)
#define PSTAR_SQ_SUM_UNROLL _Pragma("unroll")
#else
#define PSTAR_SQ_SUM_UNROLL
#endif

namespace pstar::cuda::detail {

// optim::grad_sq_sum's blocking (kSqSumBlock in host_adam.cpp, private there; the tests at block
// boundaries would catch a difference) and lanes.
constexpr int64_t kSqSumBlock = int64_t{1} << 16;
constexpr int kSqSumLanes = optim::detail::kSqSumLanes;
static_assert(kSqSumLanes == 16, "the kernel combines a block's lanes within a half-warp");
// A lane's loads are issued this many at a time ahead of their adds, so that a device thread keeps
// that many in flight while its adds form one dependent chain. The adds stay in element order.
constexpr int kSqSumBatch = 32;

PSTAR_HOST_DEVICE double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

PSTAR_HOST_DEVICE double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// sum + x * x in double (the product is exact).
PSTAR_HOST_DEVICE double add_square(double sum, float x) {
  const double d = x;
  return dadd_rn(sum, dmul_rn(d, d));
}

// Lane `lane` of block `block`: x * x summed in order over elements block * kSqSumBlock + lane +
// 16 i below the block's end and `numel`.
template <optim::GradType G>
PSTAR_HOST_DEVICE double sq_sum_lane(const void* grad, int64_t numel, int64_t block, int lane) {
  const int64_t block_begin = block * kSqSumBlock;
  const int64_t end = numel - block_begin < kSqSumBlock ? numel : block_begin + kSqSumBlock;
  double sum = 0.0;
  int64_t i = block_begin + lane;
  for (; i + (kSqSumBatch - 1) * kSqSumLanes < end; i += kSqSumBatch * kSqSumLanes) {
    float x[kSqSumBatch];
    PSTAR_SQ_SUM_UNROLL
    for (int k = 0; k < kSqSumBatch; ++k) x[k] = grad_to_f32<G>(grad, i + k * kSqSumLanes);
    PSTAR_SQ_SUM_UNROLL
    for (int k = 0; k < kSqSumBatch; ++k) sum = add_square(sum, x[k]);
  }
  for (; i < end; i += kSqSumLanes) sum = add_square(sum, grad_to_f32<G>(grad, i));
  return sum;
}

// A block's sum: its lanes added to 0.0 in lane order.
PSTAR_HOST_DEVICE double sq_sum_lanes(const double (&lanes)[kSqSumLanes]) {
  double sum = 0.0;
  PSTAR_SQ_SUM_UNROLL
  for (int j = 0; j < kSqSumLanes; ++j) sum = dadd_rn(sum, lanes[j]);
  return sum;
}

// The result from the block sums: the only one as it is, or all added to 0.0 in block order.
PSTAR_HOST_DEVICE double sq_sum_blocks(const double* block_sums, int64_t blocks) {
  if (blocks == 1) return block_sums[0];
  double sum = 0.0;
  for (int64_t b = 0; b < blocks; ++b) sum = dadd_rn(sum, block_sums[b]);
  return sum;
}

// The number of blocks of a buffer of `numel` elements.
PSTAR_HOST_DEVICE int64_t sq_sum_block_count(int64_t numel) {
  return (numel + kSqSumBlock - 1) / kSqSumBlock;
}

}  // namespace pstar::cuda::detail
