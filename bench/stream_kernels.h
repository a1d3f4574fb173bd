// STREAM-style bandwidth kernels for pstar-bench-adam's bound (Note [a sound adam bound] in
// adam.cpp): triad and copy with ordinary or non-temporal stores, a read-only sum, and the host
// Adam kernel's access pattern without its arithmetic. Each runs on omp_get_max_threads() OpenMP
// threads, each thread one contiguous range aligned as host Adam splits its work, in the vector
// ISA host Adam uses (AVX-512, else AVX2, else SSE2), compiled with its own flags
// (bench/CMakeLists.txt); `objdump -d` of stream_kernels.cpp.o shows their loops.
#pragma once

#include <cstdint>
#include <string>

namespace pstar::bench::stream {

// "avx512", "avx2" or "sse2": chosen to match `host_adam_isa` ("avx512", "avx2", "scalar").
void select_isa(const std::string& host_adam_isa);
const char* isa();

// Writes a[i] = 0, b[i] = 1, c[i] = 2 with the threads and ranges of the kernels below, so that
// each thread's pages are local to it (first touch).
void init(double* a, double* b, double* c, int64_t n);
// a[i] = b[i] + s * c[i]. Traffic per element: 16 bytes read and 8 written, plus 8 read for a's
// lines first (write-allocate) unless `nontemporal`.
void triad(double* a, const double* b, const double* c, double s, int64_t n, bool nontemporal);
// a[i] = b[i]. 8 read, 8 written (+8 write-allocate unless `nontemporal`).
void copy(double* a, const double* b, int64_t n, bool nontemporal);
// The sum of b: 8 bytes read per element.
double read(const double* b, int64_t n);
// Host Adam's fp32 access pattern, in place with no arithmetic to speak of: reads g, p, m, v and
// writes p, m, v (16 bytes read and 12 written per element; no write-allocate, every line written
// was read).
void same_shape(float* p, float* m, float* v, const float* g, int64_t n);
// The same with bf16 gradients and a bf16 copy of p in its own array, as host Adam in bf16
// training without param/grad reuse: reads g (2 bytes), p, m, v and writes p, m, v and out (2),
// 14 bytes read and 14 written per element, out's lines not read first (write-allocate, 2 more,
// unless the CPU skips it for whole-line writes).
void same_shape_bf16(float* p, float* m, float* v, const uint16_t* g, uint16_t* out, int64_t n);

// Speculative host Adam's access pattern (Note [streaming stores] in host_adam.cpp): reads p, m, v
// and a bf16 g, writes *_out and out, other arrays, with non-temporal stores where host Adam's
// vector kernels use them (AVX-512, AVX2) and ordinary ones otherwise. The outputs must be aligned
// alike (64-byte aligned arrays are).
struct Redirected {
  const float *p, *m, *v;
  const uint16_t* g;
  float *p_out, *m_out, *v_out;
  uint16_t* out;
};
// Returns the real bytes it moved per element: 28 (14 read, 14 written), or 42 with ordinary stores
// (write-allocate on every output line).
int redirected(const Redirected& r, int64_t n);

}  // namespace pstar::bench::stream
