// Chunk payload memory on the host: blocks of exact sizes, mapped from the kernel and kept for
// reuse (Note [exact-size host pool] in exact_size_pool.h), outside LibTorch's allocator so that
// allocation counting sees only non-model data. The CUDA tier's pinned pool (cuda::PinnedHostPool)
// is the same pool over page-locked memory.
#pragma once

#include <cstdint>

#include "pstar/memory/exact_size_pool.h"

namespace pstar::memory {

// Note [huge pages for payloads]
// A chunk payload is tens or hundreds of MiB, written whole at start-up and freed whole at the end.
// In 4 KiB pages, first touching it costs a page fault per page (the kernel zeroes each as it
// faults it in), and unmapping it frees every page one by one: on the 2-core development machines
// 2.2 to 3.5 GB/s to fill and 0.13 s per 2 GiB to unmap, against 5.9 to 7.8 GB/s and 0.005 s in
// transparent huge pages (2 MiB). So a mapping of at least kHugePageBytes is advised
// MADV_HUGEPAGE (which is all the kernel's default setting, "madvise", needs); the advice changes
// nothing where huge pages are off or none is free, and costs no memory (only 2 MiB-aligned ranges
// wholly inside the mapping become huge pages).
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// Where a HostPool's memory comes from: anonymous mappings (mmap), apart from malloc's heap, so
// that they stay apart from LibTorch's tensors there (Note [heap for activations] in
// core/device.cpp) and giving one back really returns its memory. Page-aligned, so 64-byte
// aligned too; advised into huge pages from kHugePageBytes (Note [huge pages for payloads]).
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
