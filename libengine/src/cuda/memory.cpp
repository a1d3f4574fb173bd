#include "pstar/cuda/memory.h"

#include <cuda_runtime.h>

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "check.h"
#include "pstar/base/size.h"

namespace pstar::cuda {
namespace detail {

// Lives until the DeviceArena and all its blocks are gone; then frees the one allocation.
struct DeviceArenaState {
  DeviceArenaState(int64_t capacity_bytes, int64_t alignment_bytes)
      : ranges(capacity_bytes, alignment_bytes) {}
  ~DeviceArenaState() {
    // Cannot throw; at process exit the runtime may already be gone.
    if (base != nullptr) (void)cudaFree(base);
  }
  DeviceArenaState(const DeviceArenaState&) = delete;
  DeviceArenaState& operator=(const DeviceArenaState&) = delete;

  mutable std::mutex mutex;
  FirstFitRanges ranges;
  char* base = nullptr;
  int device = 0;
};

// Lives until the PinnedHostPool and all its blocks are gone; then frees every block.
struct PinnedPoolState {
  PinnedPoolState() = default;
  ~PinnedPoolState() {
    for (auto& [bytes, blocks] : free) {
      for (void* p : blocks) (void)cudaFreeHost(p);
    }
  }
  PinnedPoolState(const PinnedPoolState&) = delete;
  PinnedPoolState& operator=(const PinnedPoolState&) = delete;

  mutable std::mutex mutex;
  std::unordered_map<int64_t, std::vector<void*>>
      free;  // exact size -> free blocks, last freed last
  PinnedHostPool::Stats stats;
};

}  // namespace detail

// DeviceBlock

DeviceBlock::~DeviceBlock() { reset(); }

DeviceBlock::DeviceBlock(DeviceBlock&& other) noexcept
    : arena_(std::move(other.arena_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& other) noexcept {
  if (this != &other) {
    reset();
    arena_ = std::move(other.arena_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBlock::reset() {
  if (data_ != nullptr && arena_ != nullptr) {
    const std::lock_guard<std::mutex> lock(arena_->mutex);
    // An offset this arena handed out: release cannot fail.
    arena_->ranges.release(static_cast<char*>(data_) - arena_->base);
  }
  arena_.reset();
  data_ = nullptr;
  bytes_ = 0;
}

// DeviceArena

DeviceArena::DeviceArena(int64_t capacity_bytes, int64_t alignment_bytes)
    : state_(std::make_shared<detail::DeviceArenaState>(capacity_bytes, alignment_bytes)) {
  PSTAR_CHECK(alignment_bytes <= 256, ConfigError,
              "device arena alignment must be at most 256 "
              "(what cudaMalloc guarantees), got ",
              alignment_bytes);
  PSTAR_CUDA_CHECK(cudaGetDevice(&state_->device), "cudaGetDevice");
  if (capacity_bytes > 0) {
    void* base = nullptr;
    PSTAR_CUDA_CHECK(cudaMalloc(&base, static_cast<size_t>(capacity_bytes)), "cudaMalloc of ",
                     format_bytes(capacity_bytes), " for a device arena on device ",
                     state_->device);
    state_->base = static_cast<char*>(base);
  }
}

DeviceBlock DeviceArena::allocate(int64_t bytes) {
  PSTAR_CHECK(bytes >= 0, ConfigError, "device arena: allocation of ", bytes, " bytes");
  DeviceBlock block;
  if (bytes == 0) return block;
  const std::lock_guard<std::mutex> lock(state_->mutex);
  const std::optional<int64_t> offset = state_->ranges.allocate(bytes);
  PSTAR_CHECK(offset.has_value(), OutOfMemoryError, "device arena (device ", state_->device,
              "): cannot allocate ", format_bytes(bytes), " (", bytes,
              " bytes): ", state_->ranges.describe_free());
  block.arena_ = state_;
  block.data_ = state_->base + *offset;
  block.bytes_ = bytes;
  return block;
}

int DeviceArena::device() const { return state_->device; }
void* DeviceArena::base() const { return state_->base; }
int64_t DeviceArena::capacity_bytes() const { return state_->ranges.capacity_bytes(); }

int64_t DeviceArena::bytes_in_use() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->ranges.bytes_in_use();
}

int64_t DeviceArena::bytes_free() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->ranges.bytes_free();
}

int64_t DeviceArena::largest_free_bytes() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->ranges.largest_free_bytes();
}

int64_t DeviceArena::free_range_count() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->ranges.free_range_count();
}

int64_t DeviceArena::allocation_count() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->ranges.allocation_count();
}

// PinnedBlock

PinnedBlock::~PinnedBlock() { reset(); }

PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedBlock::reset() {
  if (data_ != nullptr && pool_ != nullptr) {
    const std::lock_guard<std::mutex> lock(pool_->mutex);
    PinnedHostPool::Stats& s = pool_->stats;
    try {
      pool_->free[bytes_].push_back(data_);
      ++s.free_blocks;
    } catch (...) {
      // std::bad_alloc from the free list: give the block back to CUDA instead of keeping it.
      (void)cudaFreeHost(data_);
      --s.blocks;
      s.reserved.decrease(bytes_);
    }
    s.in_use.decrease(bytes_);
  }
  pool_.reset();
  data_ = nullptr;
  bytes_ = 0;
}

// PinnedHostPool

PinnedHostPool::PinnedHostPool() : state_(std::make_shared<detail::PinnedPoolState>()) {}

PinnedBlock PinnedHostPool::acquire(int64_t bytes) {
  PSTAR_CHECK(bytes >= 0, ConfigError, "pinned host pool: allocation of ", bytes, " bytes");
  PinnedBlock block;
  if (bytes == 0) return block;
  const std::lock_guard<std::mutex> lock(state_->mutex);
  Stats& s = state_->stats;
  void* data = nullptr;
  const auto it = state_->free.find(bytes);
  if (it != state_->free.end() && !it->second.empty()) {
    data = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) state_->free.erase(it);
    --s.free_blocks;
  } else {
    PSTAR_CUDA_CHECK(cudaHostAlloc(&data, static_cast<size_t>(bytes), cudaHostAllocDefault),
                     "cudaHostAlloc of ", format_bytes(bytes), " (", bytes,
                     " bytes) of pinned host memory, with ", format_bytes(s.reserved.current),
                     " already pinned by this pool");
    s.reserved.increase(bytes);
    ++s.blocks;
  }
  s.in_use.increase(bytes);
  block.pool_ = state_;
  block.data_ = data;
  block.bytes_ = bytes;
  return block;
}

int64_t PinnedHostPool::release_free() {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  Stats& s = state_->stats;
  int64_t released = 0;
  for (auto it = state_->free.begin(); it != state_->free.end();) {
    std::vector<void*>& blocks = it->second;
    while (!blocks.empty()) {
      PSTAR_CUDA_CHECK(cudaFreeHost(blocks.back()), "cudaFreeHost of ", format_bytes(it->first));
      blocks.pop_back();
      released += it->first;
      s.reserved.decrease(it->first);
      --s.blocks;
      --s.free_blocks;
    }
    it = state_->free.erase(it);
  }
  return released;
}

int64_t PinnedHostPool::bytes_reserved() const { return stats().reserved.current; }
int64_t PinnedHostPool::bytes_in_use() const { return stats().in_use.current; }
int64_t PinnedHostPool::block_count() const { return stats().blocks; }
int64_t PinnedHostPool::free_block_count() const { return stats().free_blocks; }

PinnedHostPool::Stats PinnedHostPool::stats() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace pstar::cuda
