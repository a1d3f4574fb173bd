#include "pstar/memory/host_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::memory {
namespace {

// Blocks are mapped from the kernel directly rather than taken from malloc's heap: they stay apart
// from LibTorch's tensors there (Note [heap for activations] in core/device.cpp), and giving one
// back really returns its memory. Mappings are page-aligned, so 64-byte aligned too.
size_t mapped_size(int64_t bytes) {
  static const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (static_cast<size_t>(bytes) + page - 1) / page * page;
}

void* map_block(int64_t bytes) {
  void* p =
      mmap(nullptr, mapped_size(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap_block(void* p, int64_t bytes) { (void)munmap(p, mapped_size(bytes)); }

}  // namespace

namespace detail {

// Lives until the HostPool and all its blocks are gone; then frees every block.
struct HostPoolState {
  HostPoolState() = default;
  ~HostPoolState() {
    for (auto& [bytes, list] : free)
      for (void* p : list) unmap_block(p, bytes);
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
      unmap_block(data_, bytes_);
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
    // The pool accounts for the bytes asked, not the whole pages mapped.
    data = map_block(bytes);
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
    for (void* p : list) unmap_block(p, bytes);
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
