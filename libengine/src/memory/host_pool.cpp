#include "pstar/memory/host_pool.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::memory {
namespace detail {

// Lives until the HostPool and all its blocks are gone; then frees every block.
struct HostPoolState {
  HostPoolState() = default;
  ~HostPoolState() {
    for (auto& [bytes, list] : free)
      for (void* p : list) std::free(p);
  }
  HostPoolState(const HostPoolState&) = delete;
  HostPoolState& operator=(const HostPoolState&) = delete;

  mutable std::mutex mutex;
  std::unordered_map<int64_t, std::vector<void*>>
      free;  // exact size -> free blocks, last freed last
  HostPool::Stats stats;
};

}  // namespace detail

HostBlock::~HostBlock() { reset(); }

HostBlock::HostBlock(HostBlock&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

HostBlock& HostBlock::operator=(HostBlock&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void HostBlock::reset() {
  if (data_ != nullptr && pool_ != nullptr) {
    const std::lock_guard<std::mutex> lock(pool_->mutex);
    HostPool::Stats& s = pool_->stats;
    try {
      pool_->free[bytes_].push_back(data_);
      ++s.free_blocks;
    } catch (...) {
      // std::bad_alloc from the free list: give the block back instead of keeping it.
      std::free(data_);
      --s.blocks;
      s.reserved.decrease(bytes_);
    }
    s.in_use.decrease(bytes_);
  }
  pool_.reset();
  data_ = nullptr;
  bytes_ = 0;
}

HostPool::HostPool() : state_(std::make_shared<detail::HostPoolState>()) {}

HostBlock HostPool::acquire(int64_t bytes) {
  PSTAR_INTERNAL_ASSERT(bytes > 0, "host pool: a block of ", bytes, " bytes");
  HostBlock block;
  const std::lock_guard<std::mutex> lock(state_->mutex);
  Stats& s = state_->stats;
  void* data = nullptr;
  const auto it = state_->free.find(bytes);
  if (it != state_->free.end() && !it->second.empty()) {
    data = it->second.back();
    it->second.pop_back();
    --s.free_blocks;
  } else {
    // aligned_alloc wants a multiple of the alignment; the pool accounts for the bytes asked.
    data = std::aligned_alloc(64, (static_cast<size_t>(bytes) + 63) / 64 * 64);
    PSTAR_CHECK(data != nullptr, OutOfMemoryError, "cannot allocate ", format_bytes(bytes),
                " of host memory for a chunk payload (the pool holds ",
                format_bytes(s.reserved.current),
                " already); lower engine.host_memory or free "
                "memory");
    s.reserved.increase(bytes);
    ++s.blocks;
  }
  s.in_use.increase(bytes);
  block.pool_ = state_;
  block.data_ = data;
  block.bytes_ = bytes;
  return block;
}

int64_t HostPool::release_free() {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  Stats& s = state_->stats;
  int64_t released = 0;
  for (auto& [bytes, list] : state_->free) {
    for (void* p : list) std::free(p);
    const auto n = static_cast<int64_t>(list.size());
    released += n * bytes;
    s.reserved.decrease(n * bytes);
    s.blocks -= n;
    s.free_blocks -= n;
  }
  state_->free.clear();
  return released;
}

HostPool::Stats HostPool::stats() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace pstar::memory
