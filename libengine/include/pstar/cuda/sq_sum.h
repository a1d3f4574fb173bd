// The sum of squares of a gradient buffer on a CUDA device (for gradient-norm clipping): the
// device-tier counterpart of optim::grad_sq_sum, with its bits (Note [cuda grad sq sum order] in
// src/cuda/sq_sum_element.h).
#pragma once

#include <cstdint>

#include "pstar/optim/host_adam.h"

struct CUstream_st;

namespace pstar::cuda {

class Stream;

// optim::grad_sq_sum of a device buffer of `numel` elements of `grad_type`, with its bits: the
// same blocks, lanes and order (Note [grad sq sum order]); +inf or NaN if an element is not finite
// (a NaN's payload may differ). Queued on `stream` (a cudaStream_t, e.g. LibTorch's current stream;
// nullptr is the legacy default stream) on the current device, and blocks the calling thread until
// the result is back. numel == 0 returns 0 without touching the device. Throws ConfigError for
// numel < 0, an invalid grad_type, a null grad with numel > 0, or a grad not aligned to its element
// size (4 bytes for fp32, 2 for 16-bit); a CUDA error becomes its typed error (error.h).
// Keeps a small device scratch per calling thread (1 double per 65536 elements, at least 32 KiB),
// freed when the thread exits.
double grad_sq_sum(const void* grad, optim::GradType grad_type, int64_t numel, CUstream_st* stream);
double grad_sq_sum(const void* grad, optim::GradType grad_type, int64_t numel, Stream& stream);

// One buffer of grad_sq_sums.
struct SqSumJob {
  const void* grad = nullptr;
  optim::GradType grad_type = optim::GradType::kF32;
  int64_t numel = 0;
};

// grad_sq_sum of each of jobs[0..count) into out[i], with its bits, but with one wait for all of
// them: every kernel is queued on `stream` into one scratch, the block sums come back in one copy,
// and the calling thread blocks once (the chunk engine's gradient norm sums every device chunk at
// each step; a wait per chunk would drain the stream that many times). The checks are
// grad_sq_sum's, all made before anything is queued. Empty jobs give 0.
void grad_sq_sums(const SqSumJob* jobs, int64_t count, double* out, CUstream_st* stream);

// The device bytes the sums' scratch holds now, over every thread and device.
int64_t sq_sum_scratch_bytes();

}  // namespace pstar::cuda
