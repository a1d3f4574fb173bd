// Filling large host buffers over all of LibTorch's intra-op threads (Note [parallel first touch]).
//
// Note [parallel first touch]
// Memory fresh from the kernel is faulted in page by page as it is first written, and the kernel
// zeroes each page then: first touching memory runs at a fraction of the rate of writing it again
// (on the 2-core development machines about 1.9 GB/s against 18 GB/s), and one thread reaches only
// its share of that. Set-up writes every byte of the model data once (issue 35), so the buffers it
// zeroes are zeroed by every thread at once, and nothing it writes next is zeroed first.
// at::parallel_for is a template whose `#pragma omp parallel` is compiled into its caller: a file
// that calls it must be compiled with -fopenmp (its sources.cmake says so), or it runs on one
// thread without a word.
#pragma once

#include <atomic>
#include <cstdint>

namespace pstar::core {

// Sets `bytes` bytes at `data` to zero, in pieces over the intra-op threads (on the calling thread
// alone when small, or when called from inside a parallel region). Returns how many threads took
// part (tests).
int parallel_zero(void* data, int64_t bytes);

// Collects which intra-op threads ran pieces of a parallel loop (at::get_thread_num() below 64).
class ThreadsSeen {
 public:
  void note();
  int count() const;

 private:
  std::atomic<uint64_t> mask_{0};
};

}  // namespace pstar::core
