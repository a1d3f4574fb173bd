// Chunk payload memory on the host: 64-byte aligned blocks of exact sizes, kept for reuse, outside
// LibTorch's allocator so that allocation counting sees only non-model data.
//
// Note [exact-size host pool]
// A chunk's move allocates its destination and frees its source. Through the C allocator, every
// move of a budgeted step would land in fresh pages (glibc gives blocks this large back to the
// kernel when they are freed) and fault them in on the thread that computes, which on the
// development machines cost many times the copy itself (issue 23: 418 ms to copy 136 MiB into
// fresh memory against 8 ms into memory touched before). The pool keeps every freed block on a
// free list of its exact size and hands it out again as it is, unzeroed: after the first steps a
// move reuses pages that are mapped already and costs the copy alone. Sizes are never rounded up
// (chunk payloads come in two or three sizes, and memory held for nothing would count against
// engine.host_memory), so a block serves only a request of exactly its size. Blocks are mapped
// from the kernel (mmap), apart from malloc's heap, and go back to it only through release_free():
// the chunk engine trims its tier's pools when its plan has promoted chunks to the device margin
// for good, and when the memory they hold would exceed engine.host_memory. The CUDA tier's pinned
// pool (cuda::PinnedHostPool) works the same way.
#pragma once

#include <cstdint>
#include <memory>

#include "pstar/memory/stat.h"

namespace pstar::memory {

namespace detail {
struct HostPoolState;
}

// A block of a HostPool. Move-only; destroying or reset()ting it puts it back on its pool's free
// list. It keeps the pool's memory alive, so it may outlive the HostPool object.
class HostBlock {
 public:
  HostBlock() = default;
  ~HostBlock();
  HostBlock(HostBlock&& other) noexcept;
  HostBlock& operator=(HostBlock&& other) noexcept;
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();

 private:
  friend class HostPool;
  std::shared_ptr<detail::HostPoolState> pool_;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Note [exact-size host pool]. Thread-safe.
class HostPool {
 public:
  struct Stats {
    Stat reserved;  // mapped from the system: in use + free
    Stat in_use;    // handed out
    int64_t blocks = 0, free_blocks = 0;
  };

  HostPool();

  // A block of exactly `bytes` (> 0), 64-byte aligned, its contents undefined: the free block of
  // that size freed last if there is one, else fresh memory. Throws OutOfMemoryError naming the
  // size (and what the pool holds) when the system has no memory for it.
  HostBlock acquire(int64_t bytes);
  // Frees every free block; returns the bytes given back.
  int64_t release_free();

  Stats stats() const;

 private:
  std::shared_ptr<detail::HostPoolState> state_;
};

}  // namespace pstar::memory
