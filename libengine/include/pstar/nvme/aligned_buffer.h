// Host memory the NVMe store reads into and writes from. O_DIRECT moves whole logical blocks
// between the disk and memory that is aligned to them, so a buffer's start is aligned and its
// capacity is its size rounded up to the alignment: the store transfers the padding too.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace pstar::nvme {

// 4096 bytes: the logical block size of every NVMe and SATA disk in use, and a multiple of the
// 512-byte blocks of older ones. NvmeStore::alignment() says what a store's file system asks for
// (statx's direct-I/O alignment where the kernel reports it, never less than this).
constexpr int64_t kDefaultAlignment = 4096;

constexpr int64_t round_up(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// An owned, aligned, uninitialised block of host memory.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `bytes` usable bytes (> 0); the block holds round_up(bytes, alignment) (a power of two).
  explicit AlignedBuffer(int64_t bytes, int64_t alignment = kDefaultAlignment);

  void* data() const { return data_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_.get());
  }
  int64_t bytes() const { return bytes_; }
  int64_t capacity() const { return capacity_; }
  int64_t alignment() const { return alignment_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  int64_t bytes_ = 0, capacity_ = 0, alignment_ = 0;
};

}  // namespace pstar::nvme
