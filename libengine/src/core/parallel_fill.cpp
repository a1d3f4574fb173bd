#include "pstar/core/parallel_fill.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace pstar::core {
namespace {

// A piece per task: large enough that a task costs far more than handing it out, and whole huge
// pages (Note [huge pages for payloads]): two threads writing halves of one 2 MiB page would wait
// for each other's fault on it.
constexpr int64_t kPieceBytes = int64_t{4} << 20;
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

// Which intra-op threads the loop ran on (at::get_thread_num() below 64).
class ThreadsSeen {
 public:
  void note() {
    const int t = at::get_thread_num();
    if (t >= 0 && t < 64) mask_.fetch_or(uint64_t{1} << t, std::memory_order_relaxed);
  }
  int count() const { return __builtin_popcountll(mask_.load()); }

 private:
  std::atomic<uint64_t> mask_{0};
};

}  // namespace

int parallel_pieces(int64_t pieces, const std::function<void(int64_t)>& piece) {
  if (pieces <= 0) return 0;
  std::atomic<int64_t> next{0};
  ThreadsSeen seen;
  // One index per thread; the pieces themselves are handed out through `next`.
  const int64_t threads = std::min<int64_t>(pieces, at::get_num_threads());
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    seen.note();
    for (int64_t i = next++; i < pieces; i = next++) piece(i);
  });
  return seen.count();
}

namespace {

// Runs fill(begin, end) over [0, bytes) of `base` in pieces: a head up to the first huge-page
// boundary, then kPieceBytes pieces on huge-page boundaries.
template <typename Fill>
int parallel_in_huge_pieces(char* base, int64_t bytes, Fill&& fill) {
  if (bytes <= 0) return 0;
  const auto head = static_cast<int64_t>(
      std::min<uintptr_t>((kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage,
                          static_cast<uintptr_t>(bytes)));
  const int64_t rest = bytes - head;
  const int64_t pieces = (head > 0 ? 1 : 0) + (rest + kPieceBytes - 1) / kPieceBytes;
  return parallel_pieces(pieces, [&](int64_t i) {
    const int64_t k = head > 0 ? i - 1 : i;  // -1: the head
    const int64_t begin = k < 0 ? 0 : head + k * kPieceBytes;
    const int64_t end = k < 0 ? head : std::min(bytes, begin + kPieceBytes);
    fill(begin, end);
  });
}

}  // namespace

int parallel_zero(void* data, int64_t bytes) {
  auto* base = static_cast<char*>(data);
  return parallel_in_huge_pieces(base, bytes, [&](int64_t begin, int64_t end) {
    std::memset(base + begin, 0, static_cast<size_t>(end - begin));
  });
}

int parallel_fault_in(void* data, int64_t bytes) {
  auto* base = static_cast<char*>(data);
  constexpr uintptr_t kPage = 4096;
  return parallel_in_huge_pieces(base, bytes, [&](int64_t begin, int64_t end) {
    // One byte in every 4 KiB page the piece touches: its first byte, then each page's start.
    // Volatile, so that stores of the value the memory already reads as are not dropped.
    const auto stop = reinterpret_cast<uintptr_t>(base + end);
    for (auto at = reinterpret_cast<uintptr_t>(base + begin); at < stop;
         at = (at / kPage + 1) * kPage)
      *reinterpret_cast<volatile char*>(at) = 0;
  });
}

}  // namespace pstar::core
