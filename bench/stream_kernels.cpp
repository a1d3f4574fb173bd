// Note [a sound adam bound] in adam.cpp. Compiled with -O3 -fopenmp and no ISA flags of its own:
// each vector variant carries its ISA as a function attribute and runs only where host Adam runs
// that ISA. Non-temporal stores are spelled with intrinsics, since GCC does not emit them for a
// plain loop (it ignores `omp simd nontemporal`); the ordinary-store loops are left to the
// vectoriser.
//
// GCC 12 warns inside its own AVX-512 headers, whose _mm512_undefined_* helpers initialize a
// variable from itself (GCC bug 105593); the pragmas must precede the include to cover them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "stream_kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

namespace pstar::bench::stream {
namespace {

// host Adam's split (libengine/src/optim/host_adam.cpp): one contiguous range per thread, its
// length rounded up to 64 elements.
constexpr int64_t kThreadAlign = 64;

template <typename Fn>
void for_each_thread_range(int64_t n, Fn&& fn) {
#pragma omp parallel num_threads(omp_get_max_threads())
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    int64_t per_thread = (n + threads - 1) / threads;
    per_thread = (per_thread + kThreadAlign - 1) / kThreadAlign * kThreadAlign;
    const int64_t begin = std::min(thread * per_thread, n);
    const int64_t end = std::min(begin + per_thread, n);
    if (begin < end) fn(begin, end);
  }
}

// The element at which a 64-byte aligned vector loop over [begin, end) of `p` starts, at most end.
template <typename T>
int64_t aligned_from(const T* p, int64_t begin, int64_t end) {
  int64_t i = begin;
  while (i < end && reinterpret_cast<uintptr_t>(p + i) % 64 != 0) ++i;
  return i;
}

struct Kernels {
  void (*triad)(double*, const double*, const double*, double, int64_t, int64_t, bool);
  void (*copy)(double*, const double*, int64_t, int64_t, bool);
  double (*read)(const double*, int64_t, int64_t);
  void (*same_shape)(float*, float*, float*, const float*, int64_t, int64_t);
  void (*same_shape_bf16)(float*, float*, float*, const uint16_t*, uint16_t*, int64_t, int64_t);
  void (*redirected)(const Redirected&, int64_t, int64_t);
  bool redirected_nontemporal;
};

// A bf16 value as fp32 (exact), and fp32 truncated to bf16: the same-shape loops' stand-ins for
// host Adam's conversions.
inline float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint16_t to_bf16(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

// ---- AVX-512 -----------------------------------------------------------------------------------

__attribute__((target("avx512f,prefer-vector-width=512"))) void triad_avx512(
    double* __restrict a, const double* b, const double* c, double s, int64_t begin, int64_t end,
    bool nontemporal) {
  if (!nontemporal) {
    for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
    return;
  }
  int64_t i = aligned_from(a, begin, end);
  for (int64_t j = begin; j < i; ++j) a[j] = b[j] + s * c[j];
  const __m512d sv = _mm512_set1_pd(s);
  for (; i + 8 <= end; i += 8)
    _mm512_stream_pd(a + i, _mm512_fmadd_pd(sv, _mm512_loadu_pd(c + i), _mm512_loadu_pd(b + i)));
  for (; i < end; ++i) a[i] = b[i] + s * c[i];
  _mm_sfence();
}

__attribute__((target("avx512f,prefer-vector-width=512"))) void copy_avx512(
    double* __restrict a, const double* b, int64_t begin, int64_t end, bool nontemporal) {
  if (!nontemporal) {
    for (int64_t i = begin; i < end; ++i) a[i] = b[i];
    return;
  }
  int64_t i = aligned_from(a, begin, end);
  for (int64_t j = begin; j < i; ++j) a[j] = b[j];
  for (; i + 8 <= end; i += 8) _mm512_stream_pd(a + i, _mm512_loadu_pd(b + i));
  for (; i < end; ++i) a[i] = b[i];
  _mm_sfence();
}

__attribute__((target("avx512f,prefer-vector-width=512"))) double read_avx512(const double* b,
                                                                              int64_t begin,
                                                                              int64_t end) {
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    acc0 = _mm512_add_pd(acc0, _mm512_loadu_pd(b + i));
    acc1 = _mm512_add_pd(acc1, _mm512_loadu_pd(b + i + 8));
  }
  double sum = _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
  for (; i < end; ++i) sum += b[i];
  return sum;
}

__attribute__((target("avx512f,prefer-vector-width=512"))) void same_shape_avx512(
    float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g,
    int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    m[i] = m[i] * 0.5f + g[i];
    v[i] = v[i] * 0.5f + g[i];
    p[i] = p[i] - g[i];
  }
}

__attribute__((target("avx512f,prefer-vector-width=512"))) void same_shape_bf16_avx512(
    float* __restrict p, float* __restrict m, float* __restrict v, const uint16_t* __restrict g,
    uint16_t* __restrict out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = from_bf16(g[i]);
    m[i] = m[i] * 0.5f + gi;
    v[i] = v[i] * 0.5f + gi;
    p[i] = p[i] - gi;
    out[i] = to_bf16(p[i]);
  }
}

// Lanes [i, i + n) of the redirected loop one at a time (heads and tails), ordinary stores.
inline void redirected_scalar(const Redirected& r, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = from_bf16(r.g[i]);
    r.m_out[i] = r.m[i] * 0.5f + gi;
    r.v_out[i] = r.v[i] * 0.5f + gi;
    r.p_out[i] = r.p[i] - gi;
    r.out[i] = to_bf16(r.p_out[i]);
  }
}

__attribute__((target("avx512f,avx512bw,prefer-vector-width=512"))) void redirected_avx512(
    const Redirected& r, int64_t begin, int64_t end) {
  int64_t i = aligned_from(r.p_out, begin, end);
  redirected_scalar(r, begin, i);
  const __m512 half = _mm512_set1_ps(0.5f);
  for (; i + 16 <= end; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.g + i));
    const __m512 g = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm512_stream_ps(r.m_out + i, _mm512_fmadd_ps(_mm512_loadu_ps(r.m + i), half, g));
    _mm512_stream_ps(r.v_out + i, _mm512_fmadd_ps(_mm512_loadu_ps(r.v + i), half, g));
    const __m512 p = _mm512_sub_ps(_mm512_loadu_ps(r.p + i), g);
    _mm512_stream_ps(r.p_out + i, p);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(r.out + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(p), 16)));
  }
  redirected_scalar(r, i, end);
  _mm_sfence();
}

// ---- AVX2 --------------------------------------------------------------------------------------

__attribute__((target("avx2,fma"))) void triad_avx2(double* __restrict a, const double* b,
                                                    const double* c, double s, int64_t begin,
                                                    int64_t end, bool nontemporal) {
  if (!nontemporal) {
    for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
    return;
  }
  int64_t i = aligned_from(a, begin, end);
  for (int64_t j = begin; j < i; ++j) a[j] = b[j] + s * c[j];
  const __m256d sv = _mm256_set1_pd(s);
  for (; i + 4 <= end; i += 4)
    _mm256_stream_pd(a + i, _mm256_fmadd_pd(sv, _mm256_loadu_pd(c + i), _mm256_loadu_pd(b + i)));
  for (; i < end; ++i) a[i] = b[i] + s * c[i];
  _mm_sfence();
}

__attribute__((target("avx2,fma"))) void copy_avx2(double* __restrict a, const double* b,
                                                   int64_t begin, int64_t end, bool nontemporal) {
  if (!nontemporal) {
    for (int64_t i = begin; i < end; ++i) a[i] = b[i];
    return;
  }
  int64_t i = aligned_from(a, begin, end);
  for (int64_t j = begin; j < i; ++j) a[j] = b[j];
  for (; i + 4 <= end; i += 4) _mm256_stream_pd(a + i, _mm256_loadu_pd(b + i));
  for (; i < end; ++i) a[i] = b[i];
  _mm_sfence();
}

__attribute__((target("avx2,fma"))) double read_avx2(const double* b, int64_t begin, int64_t end) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    acc0 = _mm256_add_pd(acc0, _mm256_loadu_pd(b + i));
    acc1 = _mm256_add_pd(acc1, _mm256_loadu_pd(b + i + 4));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < end; ++i) sum += b[i];
  return sum;
}

__attribute__((target("avx2,fma"))) void same_shape_avx2(float* __restrict p, float* __restrict m,
                                                         float* __restrict v,
                                                         const float* __restrict g, int64_t begin,
                                                         int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    m[i] = m[i] * 0.5f + g[i];
    v[i] = v[i] * 0.5f + g[i];
    p[i] = p[i] - g[i];
  }
}

__attribute__((target("avx2,fma"))) void same_shape_bf16_avx2(
    float* __restrict p, float* __restrict m, float* __restrict v, const uint16_t* __restrict g,
    uint16_t* __restrict out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = from_bf16(g[i]);
    m[i] = m[i] * 0.5f + gi;
    v[i] = v[i] * 0.5f + gi;
    p[i] = p[i] - gi;
    out[i] = to_bf16(p[i]);
  }
}

__attribute__((target("avx2,fma"))) void redirected_avx2(const Redirected& r, int64_t begin,
                                                         int64_t end) {
  int64_t i = aligned_from(r.p_out, begin, end);
  redirected_scalar(r, begin, i);
  const __m256 half = _mm256_set1_ps(0.5f);
  for (; i + 8 <= end; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r.g + i));
    const __m256 g = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    _mm256_stream_ps(r.m_out + i, _mm256_fmadd_ps(_mm256_loadu_ps(r.m + i), half, g));
    _mm256_stream_ps(r.v_out + i, _mm256_fmadd_ps(_mm256_loadu_ps(r.v + i), half, g));
    const __m256 p = _mm256_sub_ps(_mm256_loadu_ps(r.p + i), g);
    _mm256_stream_ps(r.p_out + i, p);
    const __m256i top = _mm256_srli_epi32(_mm256_castps_si256(p), 16);
    _mm_stream_si128(
        reinterpret_cast<__m128i*>(r.out + i),
        _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1)));
  }
  redirected_scalar(r, i, end);
  _mm_sfence();
}

// ---- SSE2 (every x86-64) -----------------------------------------------------------------------

void triad_sse2(double* __restrict a, const double* b, const double* c, double s, int64_t begin,
                int64_t end, bool nontemporal) {
  if (!nontemporal) {
    for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
    return;
  }
  int64_t i = aligned_from(a, begin, end);
  for (int64_t j = begin; j < i; ++j) a[j] = b[j] + s * c[j];
  const __m128d sv = _mm_set1_pd(s);
  for (; i + 2 <= end; i += 2)
    _mm_stream_pd(a + i, _mm_add_pd(_mm_loadu_pd(b + i), _mm_mul_pd(sv, _mm_loadu_pd(c + i))));
  for (; i < end; ++i) a[i] = b[i] + s * c[i];
  _mm_sfence();
}

void copy_sse2(double* __restrict a, const double* b, int64_t begin, int64_t end,
               bool nontemporal) {
  if (!nontemporal) {
    for (int64_t i = begin; i < end; ++i) a[i] = b[i];
    return;
  }
  int64_t i = aligned_from(a, begin, end);
  for (int64_t j = begin; j < i; ++j) a[j] = b[j];
  for (; i + 2 <= end; i += 2) _mm_stream_pd(a + i, _mm_loadu_pd(b + i));
  for (; i < end; ++i) a[i] = b[i];
  _mm_sfence();
}

double read_sse2(const double* b, int64_t begin, int64_t end) {
  __m128d acc0 = _mm_setzero_pd(), acc1 = _mm_setzero_pd();
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    acc0 = _mm_add_pd(acc0, _mm_loadu_pd(b + i));
    acc1 = _mm_add_pd(acc1, _mm_loadu_pd(b + i + 2));
  }
  alignas(16) double lanes[2];
  _mm_store_pd(lanes, _mm_add_pd(acc0, acc1));
  double sum = lanes[0] + lanes[1];
  for (; i < end; ++i) sum += b[i];
  return sum;
}

void same_shape_sse2(float* __restrict p, float* __restrict m, float* __restrict v,
                     const float* __restrict g, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    m[i] = m[i] * 0.5f + g[i];
    v[i] = v[i] * 0.5f + g[i];
    p[i] = p[i] - g[i];
  }
}

void same_shape_bf16_sse2(float* __restrict p, float* __restrict m, float* __restrict v,
                          const uint16_t* __restrict g, uint16_t* __restrict out, int64_t begin,
                          int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = from_bf16(g[i]);
    m[i] = m[i] * 0.5f + gi;
    v[i] = v[i] * 0.5f + gi;
    p[i] = p[i] - gi;
    out[i] = to_bf16(p[i]);
  }
}

// Host Adam's scalar kernel stores ordinarily (Note [streaming stores]): so does this one.
void redirected_sse2(const Redirected& r, int64_t begin, int64_t end) {
  redirected_scalar(r, begin, end);
}

constexpr Kernels kAvx512{triad_avx512,           copy_avx512,       read_avx512, same_shape_avx512,
                          same_shape_bf16_avx512, redirected_avx512, true};
constexpr Kernels kAvx2{triad_avx2,           copy_avx2,       read_avx2, same_shape_avx2,
                        same_shape_bf16_avx2, redirected_avx2, true};
constexpr Kernels kSse2{triad_sse2,           copy_sse2,       read_sse2, same_shape_sse2,
                        same_shape_bf16_sse2, redirected_sse2, false};

const Kernels* g_kernels = &kSse2;
const char* g_isa = "sse2";

}  // namespace

void select_isa(const std::string& host_adam_isa) {
  if (host_adam_isa == "avx512") {
    g_kernels = &kAvx512;
    g_isa = "avx512";
  } else if (host_adam_isa == "avx2") {
    g_kernels = &kAvx2;
    g_isa = "avx2";
  } else {
    g_kernels = &kSse2;
    g_isa = "sse2";
  }
}

const char* isa() { return g_isa; }

void init(double* a, double* b, double* c, int64_t n) {
  for_each_thread_range(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      a[i] = 0.0;
      b[i] = 1.0;
      c[i] = 2.0;
    }
  });
}

void triad(double* a, const double* b, const double* c, double s, int64_t n, bool nontemporal) {
  const Kernels& k = *g_kernels;
  for_each_thread_range(
      n, [&](int64_t begin, int64_t end) { k.triad(a, b, c, s, begin, end, nontemporal); });
}

void copy(double* a, const double* b, int64_t n, bool nontemporal) {
  const Kernels& k = *g_kernels;
  for_each_thread_range(n,
                        [&](int64_t begin, int64_t end) { k.copy(a, b, begin, end, nontemporal); });
}

double read(const double* b, int64_t n) {
  const Kernels& k = *g_kernels;
  double total = 0;
  for_each_thread_range(n, [&](int64_t begin, int64_t end) {
    const double part = k.read(b, begin, end);
#pragma omp atomic
    total += part;
  });
  return total;
}

void same_shape(float* p, float* m, float* v, const float* g, int64_t n) {
  const Kernels& k = *g_kernels;
  for_each_thread_range(n,
                        [&](int64_t begin, int64_t end) { k.same_shape(p, m, v, g, begin, end); });
}

void same_shape_bf16(float* p, float* m, float* v, const uint16_t* g, uint16_t* out, int64_t n) {
  const Kernels& k = *g_kernels;
  for_each_thread_range(
      n, [&](int64_t begin, int64_t end) { k.same_shape_bf16(p, m, v, g, out, begin, end); });
}

int redirected(const Redirected& r, int64_t n) {
  const Kernels& k = *g_kernels;
  for_each_thread_range(n, [&](int64_t begin, int64_t end) { k.redirected(r, begin, end); });
  return k.redirected_nontemporal ? 28 : 42;
}

}  // namespace pstar::bench::stream
