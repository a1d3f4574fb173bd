// Chunk payload memory: 64-byte aligned host allocations owned RAII-style, outside LibTorch's
// allocator so that allocation counting sees only non-model data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pstar::memory {

class Buffer {
 public:
  Buffer() = default;
  // Throws OutOfMemoryError naming the size when the allocation fails. Contents are zeroed.
  explicit Buffer(int64_t bytes);
  void* data() const { return data_.get(); }
  int64_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  int64_t bytes_ = 0;
};

}  // namespace pstar::memory
