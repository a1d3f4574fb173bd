// Chunk payload memory on the host: blocks of exact sizes, mapped from the kernel and kept for
// reuse (Note [exact-size host pool] in exact_size_pool.h), outside LibTorch's allocator so that
// allocation counting sees only non-model data. The CUDA tier's pinned pool (cuda::PinnedHostPool)
// is the same pool over page-locked memory.
#pragma once

#include <cstdint>

#include "pstar/memory/exact_size_pool.h"

namespace pstar::memory {

// Where a HostPool's memory comes from: anonymous mappings (mmap), apart from malloc's heap, so
// that they stay apart from LibTorch's tensors there (Note [heap for activations] in
// core/device.cpp) and giving one back really returns its memory. Page-aligned, so 64-byte
// aligned too.
struct MappedPages {
  // Throws OutOfMemoryError naming the size and what the pool holds (`reserved_bytes`).
  static void* allocate(int64_t bytes, int64_t reserved_bytes);
  static void release(void* p, int64_t bytes) noexcept;
};

// Note [exact-size host pool]. Thread-safe. A block may outlive the pool object.
using HostPool = ExactSizePool<MappedPages>;
using HostBlock = PoolBlock<MappedPages>;

// Instantiated once, in host_pool.cpp.
extern template class PoolBlock<MappedPages>;
extern template class ExactSizePool<MappedPages>;

}  // namespace pstar::memory
