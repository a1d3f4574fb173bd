// Device and pinned host memory for the CUDA device tier, each with an RAII owner.
//
// - DeviceArena: one cudaMalloc of a fixed size, made when the tier starts, carved into blocks of
//   the sizes asked for (Note [device arena]). The tier's budget is then a real allocation, and
//   nothing is allocated or freed through CUDA while training.
// - PinnedHostPool: page-locked host blocks (cudaHostAlloc) for asynchronous copies, each of
//   exactly the size asked for and reused for a later request of that exact size.
//
// Freeing a block returns its memory at once, in host order. Work still queued on a stream may
// be using it: the caller makes sure it has finished (an Event, or Stream::synchronize) before
// the block is freed or its memory handed out again.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "pstar/memory/exact_size_pool.h"

namespace pstar::cuda {

// Note [device arena]: byte ranges in [0, capacity), kept as a free list sorted by offset. An
// allocation takes the front of the lowest-addressed free range that can hold it (first fit) and
// leaves the rest free; a freed range is merged with the free ranges on either side
// (coalescing), so a run of freed neighbours is one range again. Sizes are rounded up only to
// the alignment (256 bytes, what cudaMalloc guarantees), never to size classes, so the arena holds
// exactly the bytes the tier plans for. Chunk payloads are few and large and of a handful of
// sizes, so fragmentation stays small, and the out-of-memory message reports it.
//
// The bookkeeping alone, without CUDA: DeviceArena uses it, and tests run it on any machine.
class FirstFitRanges {
 public:
  // alignment_bytes must be a power of two; capacity_bytes >= 0.
  FirstFitRanges(int64_t capacity_bytes, int64_t alignment_bytes);

  // bytes rounded up to the alignment.
  int64_t round_up(int64_t bytes) const;
  // The offset of a new range of round_up(bytes) bytes (bytes > 0), or nullopt when no free range
  // is large enough.
  std::optional<int64_t> allocate(int64_t bytes);
  // Frees the range that allocate() returned at `offset`, merging it with free neighbours; returns
  // its (rounded) size. Throws InternalError for an offset that is not allocated.
  int64_t release(int64_t offset);

  int64_t capacity_bytes() const { return capacity_bytes_; }
  int64_t alignment_bytes() const { return alignment_bytes_; }
  int64_t bytes_in_use() const { return bytes_in_use_; }
  int64_t bytes_free() const { return capacity_bytes_ - bytes_in_use_; }
  int64_t largest_free_bytes() const;
  int64_t free_range_count() const { return static_cast<int64_t>(free_.size()); }
  int64_t allocation_count() const { return static_cast<int64_t>(used_.size()); }
  // "1.50 MiB free of 4.00 MiB in 2 free ranges, the largest 1.00 MiB": for messages.
  std::string describe_free() const;

 private:
  int64_t capacity_bytes_;
  int64_t alignment_bytes_;
  int64_t bytes_in_use_ = 0;
  std::map<int64_t, int64_t> free_;  // offset -> size; never two adjacent (they are merged)
  std::map<int64_t, int64_t> used_;  // offset -> size as accounted (rounded)
};

namespace detail {
struct DeviceArenaState;
}  // namespace detail

// A block of a DeviceArena. Move-only; destroying or reset()ting it frees the block (see the note
// at the top on work still queued). It keeps the arena's memory alive, so it may outlive the
// DeviceArena object.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  ~DeviceBlock();
  DeviceBlock(DeviceBlock&& other) noexcept;
  DeviceBlock& operator=(DeviceBlock&& other) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;

  // A device pointer, aligned to the arena's alignment; null for an empty block.
  void* data() const { return data_; }
  // The size asked for (the arena accounts for it rounded up to its alignment).
  int64_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();

 private:
  friend class DeviceArena;
  std::shared_ptr<detail::DeviceArenaState> arena_;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Note [device arena]. Thread-safe.
class DeviceArena {
 public:
  static constexpr int64_t kDefaultAlignment = 256;

  // One cudaMalloc of capacity_bytes on the current device. Throws OutOfMemoryError ("cudaMalloc
  // of 70.00 GiB for a device arena: out of memory (cudaErrorMemoryAllocation)") when the device
  // cannot hold it.
  explicit DeviceArena(int64_t capacity_bytes, int64_t alignment_bytes = kDefaultAlignment);

  // A block of `bytes` (an empty block for 0). Throws OutOfMemoryError naming the request, the
  // free bytes, the number of free ranges and the largest one when no free range can hold it.
  DeviceBlock allocate(int64_t bytes);

  int device() const;
  void* base() const;
  int64_t capacity_bytes() const;
  int64_t bytes_in_use() const;
  int64_t bytes_free() const;
  int64_t largest_free_bytes() const;
  int64_t free_range_count() const;
  int64_t allocation_count() const;

 private:
  std::shared_ptr<detail::DeviceArenaState> state_;
};

// Where a PinnedHostPool's memory comes from: page-locked host blocks (cudaHostAlloc), for
// asynchronous copies.
struct PinnedPages {
  // Throws OutOfMemoryError ("cudaHostAlloc of 1.00 GiB: out of memory ...") when CUDA cannot pin
  // that much.
  static void* allocate(int64_t bytes, int64_t reserved_bytes);
  // cudaFreeHost; throws CudaError when it fails.
  static void release(void* p, int64_t bytes);
};

// Page-locked host blocks of exact sizes, not zeroed: acquire(n) hands out a free block of exactly
// n bytes if the pool has one, else cudaHostAlloc's a new one of exactly n bytes, and a freed block
// waits for the next request of its size (Note [exact-size host pool]: memory::HostPool is the same
// pool over pageable memory). Blocks go back to CUDA (cudaFreeHost) only through release_free() or
// once the pool and all its blocks are gone; a block may outlive the pool object. Thread-safe.
using PinnedHostPool = memory::ExactSizePool<PinnedPages>;
using PinnedBlock = memory::PoolBlock<PinnedPages>;

}  // namespace pstar::cuda

namespace pstar::memory {
// Instantiated once, in memory.cpp.
extern template class PoolBlock<cuda::PinnedPages>;
extern template class ExactSizePool<cuda::PinnedPages>;
}  // namespace pstar::memory
