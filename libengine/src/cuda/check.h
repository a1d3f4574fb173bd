// PSTAR_CUDA_CHECK: every CUDA runtime call in pstar_cuda goes through it (style: every CUDA call
// is checked). Private to src/cuda: it includes cuda_runtime.h.
#pragma once

#include <cuda_runtime.h>

#include "pstar/base/error.h"
#include "pstar/cuda/error.h"

// PSTAR_CUDA_CHECK(cudaMalloc(&p, n), "cudaMalloc of ", format_bytes(n)): the operation's text is
// built only on failure.
#define PSTAR_CUDA_CHECK(call, ...)                                   \
  do {                                                                \
    const cudaError_t pstar_cuda_error_ = (call);                     \
    if (pstar_cuda_error_ != cudaSuccess) {                           \
      ::pstar::cuda::throw_error(static_cast<int>(pstar_cuda_error_), \
                                 ::pstar::str_cat(__VA_ARGS__));      \
    }                                                                 \
  } while (0)
