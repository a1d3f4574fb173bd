// Choosing the compute device and the process-wide LibTorch settings.
#pragma once

#include <string>

#include <c10/core/Device.h>

namespace pstar::core {

// "cpu", "cuda" or "auto" (CUDA when this build and machine have it). Throws ConfigError naming
// `what` (e.g. "--device") when the choice is unknown or unavailable.
c10::Device resolve_device(const std::string& name, const std::string& what);

// Process-wide LibTorch settings, once at start-up:
// - intra-op threads: every core, or an equal share of them for each of `ranks_per_host` ranks,
//   unless OMP_NUM_THREADS says otherwise (LibTorch's own default counts one thread on some
//   virtual machines);
// - PSTAR_ONEDNN=0 turns LibTorch's oneDNN (mkldnn) CPU kernels off. bf16 matmuls then take
//   ATen's fallback GEMM, the path every CPU without AVX-512 takes (Note [bf16 on CPUs]), so its
//   speed and numerics can be reproduced on any x86-64 machine;
// - the start-up log says which OpenBLAS kernels pstar chose where OpenBLAS's own choice was its
//   slow fallback (Note [openblas core] in blas_core.h; the choice itself is made before main);
// - the C allocator keeps LibTorch's CPU tensors in its heap for reuse (Note [heap for
//   activations] in device.cpp), unless MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ say
//   otherwise.
void configure_runtime(int64_t ranks_per_host = 1);

}  // namespace pstar::core
