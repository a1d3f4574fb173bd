#include "pstar/cuda/memory.h"

#include <cuda_runtime.h>

#include <mutex>
#include <utility>

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

// PinnedPages

void* PinnedPages::allocate(int64_t bytes, int64_t reserved_bytes) {
  void* data = nullptr;
  PSTAR_CUDA_CHECK(cudaHostAlloc(&data, static_cast<size_t>(bytes), cudaHostAllocDefault),
                   "cudaHostAlloc of ", format_bytes(bytes), " (", bytes,
                   " bytes) of pinned host memory, with ", format_bytes(reserved_bytes),
                   " already pinned by this pool");
  return data;
}

void PinnedPages::release(void* p, int64_t bytes) {
  PSTAR_CUDA_CHECK(cudaFreeHost(p), "cudaFreeHost of ", format_bytes(bytes));
}

}  // namespace pstar::cuda

namespace pstar::memory {
template class PoolBlock<cuda::PinnedPages>;
template class ExactSizePool<cuda::PinnedPages>;
}  // namespace pstar::memory
