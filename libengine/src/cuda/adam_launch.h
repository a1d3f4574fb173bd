// Between adam.cpp (checks, coefficients) and adam_kernel.cu (the kernels). Private to src/cuda.
#pragma once

#include "pstar/cuda/adam.h"

struct CUstream_st;

namespace pstar::cuda::detail {

// Queues the kernel for a checked, non-empty span; throws InternalError if the launch fails.
void launch_adam(const optim::detail::AdamCoeffs& coeffs, const AdamSpanDevice& span,
                 bool vectorized, CUstream_st* stream);

}  // namespace pstar::cuda::detail
