// Between sq_sum.cpp (checks, scratch, the sum over blocks) and sq_sum_kernel.cu (the kernel).
// Private to src/cuda; the GPU test includes it to run the kernel on a small grid.
#pragma once

#include <cstdint>

#include "pstar/optim/host_adam.h"

struct CUstream_st;

namespace pstar::cuda::detail {

// The kernel's grid is at most this many CTAs (4 gradient blocks each); larger buffers loop.
// 4096 x 64 threads fill an H100 (132 SMs x 2048 threads), one thread per (block, lane).
constexpr int64_t kSqSumMaxCtas = 4096;

// Queues the kernel for a checked, non-empty buffer: writes the sum of each of its
// sq_sum_block_count(numel) blocks to `block_sums` (device memory). Throws InternalError if the
// launch fails.
void launch_sq_sum(const void* grad, optim::GradType grad_type, int64_t numel, double* block_sums,
                   int64_t max_ctas, CUstream_st* stream);

// grad_sq_sum with a grid of at most `max_ctas` CTAs (tests: a small grid makes the kernel loop).
double grad_sq_sum_on_grid(const void* grad, optim::GradType grad_type, int64_t numel,
                           int64_t max_ctas, CUstream_st* stream);

}  // namespace pstar::cuda::detail
