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

#include <cstdint>
#include <functional>

namespace pstar::core {

// Runs piece(i) for every i in [0, pieces) over the intra-op threads, each thread taking the next
// piece when it finishes one (on the calling thread alone for one piece, or from inside a parallel
// region). Set-up's work is split this way rather than statically: on a machine shared with other
// processes a thread the kernel takes off its core then does fewer pieces, instead of holding every
// other thread up at the end of its fixed share (on the 2-core development machines that made
// parallel set-up slower than serial set-up under load). Returns how many threads the loop ran on
// (which of them ran which pieces depends on timing; tests).
int parallel_pieces(int64_t pieces, const std::function<void(int64_t)>& piece);

// Sets `bytes` bytes at `data` to zero, in 4 MiB pieces on huge-page boundaries through
// parallel_pieces. Returns how many threads took part (tests).
int parallel_zero(void* data, int64_t bytes);

// Faults in every page of `bytes` bytes at `data` by writing a zero to one byte of each 4 KiB, in
// the pieces parallel_zero uses: the kernel zeroes each page as it maps it. Only for memory that
// reads as zeros already, a fresh anonymous mapping (Note [untouched blocks] in
// pstar/memory/exact_size_pool.h); there it leaves the memory as parallel_zero would, resident,
// having written each byte once rather than twice. Returns how many threads took part.
int parallel_fault_in(void* data, int64_t bytes);

// parallel_fault_in where `untouched` says the memory is such a fresh mapping, else parallel_zero.
inline int parallel_zero_new(void* data, int64_t bytes, bool untouched) {
  return untouched ? parallel_fault_in(data, bytes) : parallel_zero(data, bytes);
}

}  // namespace pstar::core
