#include "pstar/memory/cpu_counter.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "pstar/core/torch_compat.h"

namespace pstar::memory {
namespace {

// Wraps the CPU allocator. DataPtr contexts must equal their data pointers (raw_allocate asserts
// it), so the size and the base deleter of each live allocation are kept in a table.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) PSTAR_ALLOCATE_CONST override {
    c10::DataPtr inner = base_->allocate(n);
    const auto device = inner.device();
    void* data = inner.get();
    if (data == nullptr) return c10::DataPtr(nullptr, nullptr, &CountingAllocator::release, device);
    const c10::DeleterFnPtr base_deleter = inner.get_deleter();
    void* context = inner.release_context();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_[data] = Entry{static_cast<int64_t>(n), context, base_deleter};
    }
    add(static_cast<int64_t>(n));
    return c10::DataPtr(data, data, &CountingAllocator::release, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::release; }

#if PSTAR_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  int64_t current() const { return current_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  int64_t reset_peak() { return peak_.exchange(current(), std::memory_order_relaxed); }

  static CountingAllocator* self;

 private:
  struct Entry {
    int64_t bytes;
    void* context;
    c10::DeleterFnPtr deleter;
  };

  static void release(void* data) {
    if (data == nullptr) return;
    Entry entry;
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      auto it = self->live_.find(data);
      if (it == self->live_.end()) return;
      entry = it->second;
      self->live_.erase(it);
    }
    self->current_.fetch_sub(entry.bytes, std::memory_order_relaxed);
    if (entry.deleter != nullptr) entry.deleter(entry.context);
  }

  void add(int64_t n) const {
    const int64_t now = current_.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t seen = peak_.load(std::memory_order_relaxed);
    while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }

  c10::Allocator* base_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, Entry> live_;
  mutable std::atomic<int64_t> current_{0};
  mutable std::atomic<int64_t> peak_{0};
};

CountingAllocator* CountingAllocator::self = nullptr;

CountingAllocator& counting_allocator() {
  // Never destroyed: tensors allocated through it may be freed during static destruction.
  static CountingAllocator* allocator = [] {
    auto* a = new CountingAllocator(c10::GetCPUAllocator());  // NOLINT: intentionally immortal
    CountingAllocator::self = a;
    c10::SetCPUAllocator(a, /*priority=*/100);
    return a;
  }();
  return *allocator;
}

}  // namespace

CpuAllocationCounter::CpuAllocationCounter() { counting_allocator(); }

CpuAllocationCounter& CpuAllocationCounter::instance() {
  static CpuAllocationCounter counter;
  return counter;
}

int64_t CpuAllocationCounter::current_bytes() const { return counting_allocator().current(); }
int64_t CpuAllocationCounter::peak_bytes() const { return counting_allocator().peak(); }
int64_t CpuAllocationCounter::reset_peak() { return counting_allocator().reset_peak(); }

}  // namespace pstar::memory
