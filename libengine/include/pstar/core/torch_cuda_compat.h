// The LibTorch CUDA API differences the CUDA device tier meets (torch_compat.h has the rest). It
// includes c10's CUDA headers, and through them cuda_runtime.h, so only sources built against a
// CUDA LibTorch (or given the toolkit's include directory, as the compile check in
// libengine/src/tier/sources.cmake is) include it; no header that CPU code includes may.
#pragma once

// Debian's libtorch-dev (1.13, a CPU build) ships c10/cuda's headers without the generated
// c10/cuda/impl/cuda_cmake_macros.h that c10/cuda/CUDAMacros.h includes. That file only defines
// C10_CUDA_BUILD_SHARED_LIBS, which matters on Windows alone, and CUDAMacros.h skips it when
// C10_CUDA_NO_CMAKE_CONFIGURE_FILE is defined. CUDA builds of LibTorch have the file, so there
// this does nothing. It must come before any c10/cuda header.
#if !__has_include(<c10/cuda/impl/cuda_cmake_macros.h>) && !defined(C10_CUDA_NO_CMAKE_CONFIGURE_FILE)
#define C10_CUDA_NO_CMAKE_CONFIGURE_FILE
#endif

#include <cstdint>

#include <ATen/Context.h>
#include <c10/core/Device.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "pstar/core/torch_compat.h"

namespace pstar::compat {

// LibTorch's CUDA state (its caching allocator among it) is made on first use; the allocator has
// no statistics for a device before. lazyInitDevice(kCUDA) replaced lazyInitCUDA in 2.6, which
// still exists but warns.
inline void lazy_init_cuda() {
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 6)
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
#else
  at::globalContext().lazyInitCUDA();
#endif
}

struct CudaAllocatedBytes {
  int64_t current = 0;
  int64_t peak = 0;
};

// What LibTorch's caching allocator holds reserved from the device (its cudaMalloc'd segments,
// freed blocks among them) now and at most since the last reset_cuda_allocated_peak, read like
// cuda_allocated_bytes.
inline CudaAllocatedBytes cuda_reserved_bytes(int device) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  const auto& aggregate = stats.reserved_bytes[0];
  return CudaAllocatedBytes{aggregate.current, aggregate.peak};
}

// The bytes of LibTorch's live CUDA allocations on `device` (the caching allocator's
// allocated_bytes over all pools), now and at most since the last reset_cuda_allocated_peak. The
// device argument is an int in 1.13 and a c10::DeviceIndex in 2.x, and DeviceStats moved to
// c10/core/CachingDeviceAllocator.h in 2.6; a DeviceIndex argument, `auto` and index 0 (AGGREGATE
// in every version) read it the same way everywhere.
inline CudaAllocatedBytes cuda_allocated_bytes(int device) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  const auto& aggregate = stats.allocated_bytes[0];
  return CudaAllocatedBytes{aggregate.current, aggregate.peak};
}

// Starts a new peak window at the current level (every statistic's peak, not only allocated_bytes).
inline void reset_cuda_allocated_peak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

}  // namespace pstar::compat
