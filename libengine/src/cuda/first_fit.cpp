// Note [device arena] (pstar/cuda/memory.h): the bookkeeping, without CUDA.
#include <algorithm>
#include <iterator>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/cuda/memory.h"

namespace pstar::cuda {

FirstFitRanges::FirstFitRanges(int64_t capacity_bytes, int64_t alignment_bytes)
    : capacity_bytes_(capacity_bytes), alignment_bytes_(alignment_bytes) {
  PSTAR_CHECK(capacity_bytes >= 0, ConfigError, "arena capacity must be >= 0, got ",
              capacity_bytes);
  PSTAR_CHECK(alignment_bytes > 0 && (alignment_bytes & (alignment_bytes - 1)) == 0, ConfigError,
              "arena alignment must be a power of two, got ", alignment_bytes);
  if (capacity_bytes > 0) free_.emplace(0, capacity_bytes);
}

int64_t FirstFitRanges::round_up(int64_t bytes) const {
  return (bytes + alignment_bytes_ - 1) & ~(alignment_bytes_ - 1);
}

std::optional<int64_t> FirstFitRanges::allocate(int64_t bytes) {
  PSTAR_CHECK(bytes > 0, ConfigError, "arena allocation must be > 0 bytes, got ", bytes);
  if (bytes > capacity_bytes_) return std::nullopt;  // also keeps round_up from overflowing
  const int64_t size = round_up(bytes);
  // Offsets start aligned and sizes are rounded, so every free range starts aligned; a range
  // that is the capacity's unaligned tail can be smaller than `size` only, never misaligned.
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const int64_t offset = it->first;
    const int64_t rest = it->second - size;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + size, rest);
    used_.emplace(offset, size);
    bytes_in_use_ += size;
    return offset;
  }
  // The capacity's tail is not a multiple of the alignment: a request rounded up past it may
  // still fit exactly in the last range.
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == capacity_bytes_ && last->second >= bytes) {
      const int64_t offset = last->first;
      const int64_t tail = last->second;
      free_.erase(last);
      used_.emplace(offset, tail);
      bytes_in_use_ += tail;
      return offset;
    }
  }
  return std::nullopt;
}

int64_t FirstFitRanges::release(int64_t offset) {
  const auto used = used_.find(offset);
  PSTAR_INTERNAL_ASSERT(used != used_.end(), "arena: no allocation at offset ", offset);
  int64_t start = offset;
  int64_t size = used->second;
  const int64_t freed = size;
  used_.erase(used);
  bytes_in_use_ -= freed;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == offset + freed) {
    size += next->second;
    free_.erase(next);
  }
  free_.emplace(start, size);
  return freed;
}

int64_t FirstFitRanges::largest_free_bytes() const {
  int64_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  return largest;
}

std::string FirstFitRanges::describe_free() const {
  const int64_t ranges = free_range_count();
  return str_cat(format_bytes(bytes_free()), " free of ", format_bytes(capacity_bytes_), " in ",
                 ranges, ranges == 1 ? " free range" : " free ranges", ", the largest ",
                 format_bytes(largest_free_bytes()));
}

}  // namespace pstar::cuda
