#include "pstar/core/parallel_fill.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

namespace pstar::core {
namespace {

// A piece per task: large enough that a task costs far more than handing it out.
constexpr int64_t kPieceBytes = int64_t{1} << 20;

}  // namespace

void ThreadsSeen::note() {
  const int t = at::get_thread_num();
  if (t >= 0 && t < 64) mask_.fetch_or(uint64_t{1} << t, std::memory_order_relaxed);
}

int ThreadsSeen::count() const { return __builtin_popcountll(mask_.load()); }

int parallel_zero(void* data, int64_t bytes) {
  if (bytes <= 0) return 0;
  auto* base = static_cast<char*>(data);
  const int64_t pieces = (bytes + kPieceBytes - 1) / kPieceBytes;
  ThreadsSeen seen;
  at::parallel_for(0, pieces, 1, [&](int64_t first, int64_t last) {
    seen.note();
    const int64_t begin = first * kPieceBytes, end = std::min(bytes, last * kPieceBytes);
    std::memset(base + begin, 0, static_cast<size_t>(end - begin));
  });
  return seen.count();
}

}  // namespace pstar::core
