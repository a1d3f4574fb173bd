// A pool of memory blocks of exact sizes, kept on free lists for reuse: the one free list behind
// memory::HostPool (pageable host memory, mapped from the kernel) and cuda::PinnedHostPool
// (page-locked host memory from cudaHostAlloc). Header-only and free of LibTorch and CUDA, so that
// pstar_cuda, which links no engine module, shares it; where the memory comes from is the
// template's parameter.
//
// Note [exact-size host pool]
// A chunk's move allocates its destination and frees its source. Through the C allocator, every
// move of a budgeted step would land in fresh pages (glibc gives blocks this large back to the
// kernel when they are freed) and fault them in on the thread that computes, which on the
// development machines cost many times the copy itself (issue 23: 418 ms to copy 136 MiB into
// fresh memory against 8 ms into memory touched before). The pool keeps every freed block on a
// free list of its exact size and hands it out again as it is, unzeroed: after the first steps a
// move reuses pages that are mapped already and costs the copy alone. Sizes are never rounded up
// (chunk payloads come in two or three sizes, memory held for nothing would count against
// engine.host_memory, and pinned memory is too scarce to waste), so a block serves only a request
// of exactly its size. Blocks go back to their source only through release_free() or once the
// pool and all its blocks are gone: the chunk engine trims its tier's pools when its plan has
// promoted chunks to the device margin for good, and when the memory they hold would exceed
// engine.host_memory.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/memory/stat.h"

namespace pstar::memory {

// What a pool holds, in the one counter shape.
struct PoolStats {
  Stat reserved;  // held from the source: in use + free
  Stat in_use;    // handed out
  int64_t blocks = 0, free_blocks = 0;
};

// The free lists themselves, without memory or locking: exact size -> free blocks, the block freed
// last at the back, with the counts of PoolStats. ExactSizePool owns one behind its mutex.
class ExactSizeFreeList {
 public:
  ExactSizeFreeList() = default;
  ExactSizeFreeList(const ExactSizeFreeList&) = delete;
  ExactSizeFreeList& operator=(const ExactSizeFreeList&) = delete;

  // The free block of exactly `bytes` freed last, now in use; null when there is none. With
  // `untouched`, whether the block is one fresh from the source that was never in use (a reserved
  // one: Note [untouched blocks]).
  void* take(int64_t bytes, bool* untouched = nullptr) {
    const auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    const Free f = it->second.back();
    void* p = f.p;
    if (untouched != nullptr) *untouched = f.untouched;
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    --stats_.free_blocks;
    stats_.in_use.increase(bytes);
    return p;
  }

  // A block of `bytes` fresh from the source, now in use.
  void add_in_use(int64_t bytes) {
    stats_.reserved.increase(bytes);
    ++stats_.blocks;
    stats_.in_use.increase(bytes);
  }

  // A block in use comes back. False when the list cannot grow (std::bad_alloc): the block is then
  // no longer counted, and the caller gives it back to the source.
  bool put(void* p, int64_t bytes) noexcept {
    stats_.in_use.decrease(bytes);
    try {
      free_[bytes].push_back(Free{p, false});
    } catch (...) {
      forget(bytes);
      return false;
    }
    ++stats_.free_blocks;
    return true;
  }

  // Removes the free blocks one by one, calling release(p, bytes) on each before it stops counting;
  // returns the bytes released. If release throws, the blocks released so far are uncounted and
  // the rest (the one that failed included) stay free.
  template <typename Release>
  int64_t release_all(Release&& release) {
    int64_t released = 0;
    while (!free_.empty()) {
      const auto it = free_.begin();
      const int64_t bytes = it->first;
      std::vector<Free>& list = it->second;
      while (!list.empty()) {
        release(list.back().p, bytes);
        list.pop_back();
        --stats_.free_blocks;
        forget(bytes);
        released += bytes;
      }
      free_.erase(it);
    }
    return released;
  }

  // A block of `bytes` fresh from the source, free for the next request of its size.
  void add_free(void* p, int64_t bytes) {
    free_[bytes].push_back(Free{p, true});
    stats_.reserved.increase(bytes);
    ++stats_.blocks;
    ++stats_.free_blocks;
  }

  // Removes every free block from the lists and the counts at once and returns them (p, bytes),
  // for the caller to give back.
  std::vector<std::pair<void*, int64_t>> take_all() {
    std::vector<std::pair<void*, int64_t>> out;
    for (auto& [bytes, list] : free_) {
      for (const Free& f : list) {
        out.emplace_back(f.p, bytes);
        --stats_.free_blocks;
        forget(bytes);
      }
    }
    free_.clear();
    return out;
  }

  const PoolStats& stats() const { return stats_; }

 private:
  void forget(int64_t bytes) {
    stats_.reserved.decrease(bytes);
    --stats_.blocks;
  }

  struct Free {
    void* p;
    bool untouched;  // fresh from the source and never in use
  };
  std::unordered_map<int64_t, std::vector<Free>> free_;
  PoolStats stats_;
};

// The threads ExactSizePool::reserve is given by the tiers: the cores, at most 16.
inline unsigned reserve_threads() {
  return std::min(16u, std::max(1u, std::thread::hardware_concurrency()));
}

// Source is where the memory comes from, a type with two static functions:
//   void* allocate(int64_t bytes, int64_t reserved_bytes): fresh memory of `bytes`, or throws
//       OutOfMemoryError naming the size (and `reserved_bytes`, what the pool holds already);
//   void release(void* p, int64_t bytes): gives it back; may throw when the source reports an
//       error (release_free passes it on; destructors ignore it).
template <typename Source>
class ExactSizePool;

namespace detail {

// Runs work() on `threads` threads, this one among them, and returns when all are done; work
// takes its pieces itself (an atomic counter), so a thread that cannot be started leaves its share
// to the others.
template <typename Work>
void on_threads(size_t threads, const Work& work) {
  std::vector<std::thread> helpers;
  try {
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  } catch (...) {
    // No thread to spare: the ones started and this one do it all.
  }
  work();
  for (auto& h : helpers) h.join();
}

// Note [parallel release]
// A run's end gives back every chunk payload at once: tens of GiB at 8B parameters, each block's
// pages freed by the kernel (and on the CUDA tier unpinned) one after another, which took 3.0 s at
// 7.46B on an H100 machine (issue 35). When the pool goes, its blocks are given back by several
// threads at once, each taking the next block: what the source's release does per page runs
// side by side (munmap frees its pages with the process's mapping lock shared), and a large pool
// is gone in the time of its share per thread.
inline constexpr int64_t kParallelReleaseBytes = int64_t{256} << 20;
inline constexpr unsigned kMaxReleaseThreads = 16;

// Calls release(p, bytes) on every block, over several threads when they hold
// kParallelReleaseBytes or more; a release that throws is skipped (the memory is lost, not
// counted: this is the pool's end).
template <typename Release>
void release_in_parallel(const std::vector<std::pair<void*, int64_t>>& blocks, Release release) {
  int64_t total = 0;
  for (const auto& block : blocks) total += block.second;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = total < kParallelReleaseBytes
                             ? 1
                             : std::min<size_t>({cores, kMaxReleaseThreads, blocks.size()});
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < blocks.size(); i = next++) {
      try {
        release(blocks[i].first, blocks[i].second);
      } catch (...) {
        // At process exit the source may be gone already (the CUDA runtime unloading).
      }
    }
  };
  on_threads(threads, work);
}

// Lives until the pool object and all its blocks are gone; then gives every block back (Note
// [parallel release]).
template <typename Source>
struct ExactSizePoolState {
  ExactSizePoolState() = default;
  ~ExactSizePoolState() {
    try {
      release_in_parallel(list.take_all(),
                          [](void* p, int64_t bytes) { Source::release(p, bytes); });
    } catch (...) {
      // No memory for the list of blocks: they stay mapped until the process ends.
    }
  }
  ExactSizePoolState(const ExactSizePoolState&) = delete;
  ExactSizePoolState& operator=(const ExactSizePoolState&) = delete;

  mutable std::mutex mutex;
  ExactSizeFreeList list;
};

}  // namespace detail

// A block of an ExactSizePool. Move-only; destroying or reset()ting it puts it back on its pool's
// free list. It keeps the pool's memory alive, so it may outlive the pool object.
template <typename Source>
class PoolBlock {
 public:
  PoolBlock() = default;
  ~PoolBlock() { reset(); }
  PoolBlock(PoolBlock&& other) noexcept
      : pool_(std::move(other.pool_)),
        data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        untouched_(std::exchange(other.untouched_, false)) {}
  PoolBlock& operator=(PoolBlock&& other) noexcept {
    if (this != &other) {
      reset();
      pool_ = std::move(other.pool_);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      untouched_ = std::exchange(other.untouched_, false);
    }
    return *this;
  }
  PoolBlock(const PoolBlock&) = delete;
  PoolBlock& operator=(const PoolBlock&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  // Whether the block came to its holder fresh from the source, never in use before (Note
  // [untouched blocks]); a block that was freed and handed out again is not.
  bool untouched() const { return untouched_; }

  void reset() noexcept {
    if (data_ != nullptr && pool_ != nullptr) {
      const std::lock_guard<std::mutex> lock(pool_->mutex);
      if (!pool_->list.put(data_, bytes_)) {
        try {
          Source::release(data_, bytes_);
        } catch (...) {
          // Nothing to do in a destructor: the memory is lost, and no longer counted.
        }
      }
    }
    pool_.reset();
    data_ = nullptr;
    bytes_ = 0;
    untouched_ = false;
  }

 private:
  friend class ExactSizePool<Source>;
  std::shared_ptr<detail::ExactSizePoolState<Source>> pool_;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  bool untouched_ = false;
};

// Note [untouched blocks]
// Anonymous memory the kernel maps reads as zeros, and the kernel zeroes each page as it is first
// written: zeroing such memory ourselves writes every byte a second time. At set-up, where nearly
// every block is fresh, that second pass was most of the payloads' first-touch cost (issue 35: on
// the idle 2-core development machine, two threads faulted in 4 GiB of a fresh huge-page mapping
// at 10.2 GB/s by writing a byte a page, and zeroed it with memset at 2.6 GB/s; in 4 KiB pages
// both ran at 2.8 to 2.9 GB/s). So the pool says which blocks reach their holder untouched, fresh
// from the source (reserved ones included) and never in use, and a tier whose source is such
// memory (MappedPages) only faults their pages in (core::parallel_fault_in) where zeros are asked
// for. A block used before holds its last holder's bytes and is zeroed as before; so is pinned
// memory, for which CUDA promises no contents.

// Note [exact-size host pool]. Thread-safe.
template <typename Source>
class ExactSizePool {
 public:
  using Block = PoolBlock<Source>;
  using Stats = PoolStats;

  ExactSizePool() : state_(std::make_shared<detail::ExactSizePoolState<Source>>()) {}

  // A block of exactly `bytes`, its contents undefined: the free block of that size freed last if
  // there is one, else fresh memory from the source (whose OutOfMemoryError passes through). An
  // empty block for 0. The block says whether it is untouched (Note [untouched blocks]).
  Block acquire(int64_t bytes) {
    PSTAR_INTERNAL_ASSERT(bytes >= 0, "a pool block of ", bytes, " bytes");
    Block block;
    if (bytes == 0) return block;
    const std::lock_guard<std::mutex> lock(state_->mutex);
    bool untouched = false;
    void* data = state_->list.take(bytes, &untouched);
    if (data == nullptr) {
      data = Source::allocate(bytes, state_->list.stats().reserved.current);
      state_->list.add_in_use(bytes);
      untouched = true;
    }
    block.pool_ = state_;
    block.data_ = data;
    block.bytes_ = bytes;
    block.untouched_ = untouched;
    return block;
  }

  // Note [reserved blocks]
  // Takes `count` fresh blocks of exactly `bytes` from the source at once, over up to `threads`
  // threads, and keeps them free for the requests of that size to come. A source whose allocation
  // does the work itself (cudaHostAlloc pins every page inside the call) otherwise runs once per
  // chunk payload, one after another, as the engine makes its chunks: at 8B parameters that is
  // tens of GiB pinned on one thread (issue 35). `run` wraps each thread's work (the CUDA tier
  // selects its device there); null runs it as it is. On an allocation failure the blocks made
  // stay free in the pool and the first error is thrown.
  void reserve(int64_t bytes, int64_t count, unsigned threads,
               const std::function<void(const std::function<void()>&)>& run = nullptr) {
    PSTAR_INTERNAL_ASSERT(bytes > 0 && count >= 0, "reserving ", count, " blocks of ", bytes);
    if (count == 0) return;
    std::vector<void*> made(static_cast<size_t>(count), nullptr);
    std::atomic<int64_t> next{0};
    std::exception_ptr failure;
    std::mutex failure_mutex;
    const int64_t held = stats().reserved.current;
    const auto work = [&] {
      for (int64_t i = next++; i < count; i = next++) {
        try {
          made[static_cast<size_t>(i)] = Source::allocate(bytes, held + i * bytes);
        } catch (...) {
          const std::lock_guard<std::mutex> lock(failure_mutex);
          if (!failure) failure = std::current_exception();
          next = count;  // no point in asking for more
        }
      }
    };
    const auto in_thread = [&] {
      if (run)
        run(work);
      else
        work();
    };
    detail::on_threads(std::min<size_t>(std::max(threads, 1u), static_cast<size_t>(count)),
                       in_thread);
    {
      const std::lock_guard<std::mutex> lock(state_->mutex);
      for (void* p : made)
        if (p != nullptr) state_->list.add_free(p, bytes);
    }
    if (failure) std::rethrow_exception(failure);
  }

  // Gives every free block back to the source; returns the bytes given back.
  int64_t release_free() {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->list.release_all([](void* p, int64_t bytes) { Source::release(p, bytes); });
  }

  Stats stats() const {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->list.stats();
  }

 private:
  std::shared_ptr<detail::ExactSizePoolState<Source>> state_;
};

}  // namespace pstar::memory
