// The counter-based generator's kernel (Note [counter-based init] in pstar/model/init.h), included
// once per instruction set: init_kernel.cpp (baseline x86-64), init_kernel_avx2.cpp and
// init_kernel_avx512.cpp, each with PSTAR_INIT_ISA naming its namespace and its own -m flags, all
// with -ffp-contract=off and -fno-math-errno (model/sources.cmake). Every operation below is an
// IEEE +, -, *, / or sqrt, an exact conversion, or integer arithmetic, so a lane of any vector
// width computes the same bits as the scalar code: the instruction sets differ in speed only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "init_kernel.h"
#include "pstar/optim/float_bits.h"

#ifndef PSTAR_INIT_ISA
#error "define PSTAR_INIT_ISA (the instruction set's namespace) before including this file"
#endif

namespace pstar::model::init_kernel::PSTAR_INIT_ISA {
namespace {

using optim::bits::bits_f32;
using optim::bits::f32_bits;

// Philox blocks computed together: the rounds and Box-Muller below are loops over these lanes,
// which the compiler vectorises. Several vectors' worth, so that the long dependency chains of one
// vector (the division, the polynomials) overlap with the next's. Timing write_range alone on one
// thread of the idle 2-core development machine (AVX-512), 2^26 values: 284 M values/s with 16
// lanes (one zmm register) and the counters loaded from memory, 609 M with 64 lanes made in
// registers; under load 128 and 256 lanes were no faster than 64. The order of the values does
// not depend on it (element 4 b + i of a parameter is word i of block b).
constexpr int kLanes = 64;

// Philox4x32's multipliers and key increments (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011).
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

// ln(u1), u1 = (v + 1/2) / 2^31 in (0, 1): 2 atanh(s) plus e ln 2, one division and one series
// for both ways of getting s. Up to 0.7 from u1 = 2^e m with m in (sqrt(2)/2, sqrt(2)], s = (m - 1)
// / (m + 1); above it from t = 1 - u1 (`rest`, exact in fp32 where u1 itself keeps only 24 bits), s
// = -t / (2 - t), e = 0. |s| <= 0.177 either way, where the series to s^9 is exact to about 1e-9.
// The two are chosen with bit masks, not branches, so that the loop vectorises.
inline float log_u1(float u, float rest, uint32_t near_one) {
  const uint32_t b = f32_bits(u);
  const uint32_t mantissa = b & 0x7FFFFFu;
  // All ones where the mantissa is above sqrt(2)'s (0x3504F3): halve m, add one to e.
  const uint32_t above = 0u - static_cast<uint32_t>(mantissa > 0x3504F3u);
  const float m = bits_f32(mantissa | (0x3F800000u - (above & 0x00800000u)));
  const int32_t e = (static_cast<int32_t>(b >> 23) - 127 - static_cast<int32_t>(above)) &
                    static_cast<int32_t>(~near_one);
  const float num = bits_f32((f32_bits(m - 1.0f) & ~near_one) | (f32_bits(-rest) & near_one));
  const float den = bits_f32((f32_bits(m + 1.0f) & ~near_one) | (f32_bits(2.0f - rest) & near_one));
  const float s = num / den;
  const float s2 = s * s;
  float p = s2 * (1.0f / 9.0f) + (1.0f / 7.0f);
  p = p * s2 + (1.0f / 5.0f);
  p = p * s2 + (1.0f / 3.0f);
  p = p * s2 + 1.0f;
  return static_cast<float>(e) * 0.693147180559945f + 2.0f * s * p;
}

// Two standard normals from two words: u1 = (v + 1/2) / 2^31 in (0, 1) with v = w_r >> 1, the
// angle 2 pi w_t / 2^32 from w_t's top 24 bits, split into a quadrant q and x in [-pi/4, pi/4)
// whose sine and cosine come from their Taylor series (to x^9 and x^10: within 2e-9). ln(u1) comes
// from u1 itself below 0.7 and from 1 - u1 = (2^31 - 1 - v + 1/2) / 2^31 above: an fp32 u1 near 1
// keeps only 24 bits, and the small radii there would lose their precision with them.
inline void box_muller(uint32_t wr, uint32_t wt, float& z0, float& z1) {
  const uint32_t v = wr >> 1;
  const float u = (static_cast<float>(static_cast<int32_t>(v)) + 0.5f) * 0x1p-31f;
  const float rest = (static_cast<float>(static_cast<int32_t>(0x7FFFFFFFu - v)) + 0.5f) * 0x1p-31f;
  const uint32_t near_one = 0u - static_cast<uint32_t>(v > 1503238553u);  // u1 > 0.7
  const float r = __builtin_sqrtf(-2.0f * log_u1(u, rest, near_one));
  const auto t = static_cast<int32_t>(wt >> 8);  // the angle in 2^-24 turns
  const int32_t q = (t + (1 << 21)) >> 22;       // the nearest quarter turn, 0..4
  const float x = static_cast<float>(t - (q << 22)) * 3.74507028e-07f;  // (pi / 2) / 2^22
  const float x2 = x * x;
  float ps = x2 * (1.0f / 362880.0f) - (1.0f / 5040.0f);
  ps = ps * x2 + (1.0f / 120.0f);
  ps = ps * x2 - (1.0f / 6.0f);
  const uint32_t sin_x = f32_bits(x + x * x2 * ps);
  float pc = x2 * (-1.0f / 3628800.0f) + (1.0f / 40320.0f);
  pc = pc * x2 - (1.0f / 720.0f);
  pc = pc * x2 + (1.0f / 24.0f);
  pc = pc * x2 - 0.5f;
  const uint32_t cos_x = f32_bits(1.0f + x2 * pc);
  // cos(q pi/2 + x), sin(q pi/2 + x): odd quadrants swap sine and cosine; the cosine is negative
  // in quadrants 1 and 2, the sine in 2 and 3. Selected with bit masks, not branches, so that the
  // loop vectorises.
  const auto uq = static_cast<uint32_t>(q);
  const uint32_t swap = 0u - (uq & 1u);
  const uint32_t c = ((cos_x & ~swap) | (sin_x & swap)) ^ (((uq + 1u) & 2u) << 30);
  const uint32_t s = ((sin_x & ~swap) | (cos_x & swap)) ^ ((uq & 2u) << 30);
  z0 = r * bits_f32(c);
  z1 = r * bits_f32(s);
}

// The vector unit's pieces of the Philox rounds below, one set per instruction set, so that the
// rounds themselves are written once. Vec holds kVecLanes 32-bit lanes.
#if defined(__AVX512F__)
#define PSTAR_INIT_VECTOR 1
using Vec = __m512i;
constexpr int kVecLanes = 16;
// GCC 12's AVX-512 shift and multiply intrinsics pass _mm512_undefined_epi32() as their masked-off
// source, which -Wmaybe-uninitialized reports; nothing here is uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline Vec splat(uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
inline Vec xor3(Vec a, Vec b, Vec c) { return _mm512_xor_si512(_mm512_xor_si512(a, b), c); }
// The low and high words of the 64-bit products of a's lanes and m's: the even lanes' products,
// then the odd lanes' (moved down into the even halves).
inline void mul_wide(Vec a, Vec m, Vec& lo, Vec& hi) {
  const Vec even = _mm512_mul_epu32(a, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}
// The low and high words of block + l + lane: the high word gains one in the lanes whose low word
// wrapped past 2^32.
inline void block_words(uint32_t block_lo, uint32_t block_hi, int l, Vec& w0, Vec& w1) {
  const Vec lo = splat(block_lo);
  w0 = _mm512_add_epi32(lo, _mm512_add_epi32(splat(static_cast<uint32_t>(l)),
                                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                               12, 13, 14, 15)));
  const __mmask16 carry = _mm512_cmplt_epu32_mask(w0, lo);
  w1 = _mm512_mask_add_epi32(splat(block_hi), carry, splat(block_hi), splat(1));
}
inline void store_lanes(uint32_t* p, Vec v) { _mm512_storeu_si512(p, v); }
#pragma GCC diagnostic pop
#elif defined(__AVX2__)
#define PSTAR_INIT_VECTOR 1
using Vec = __m256i;
constexpr int kVecLanes = 8;
inline Vec splat(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
inline Vec xor3(Vec a, Vec b, Vec c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
inline void mul_wide(Vec a, Vec m, Vec& lo, Vec& hi) {
  const Vec even = _mm256_mul_epu32(a, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}
inline void block_words(uint32_t block_lo, uint32_t block_hi, int l, Vec& w0, Vec& w1) {
  const Vec lo = splat(block_lo);
  w0 = _mm256_add_epi32(lo, _mm256_setr_epi32(l, l + 1, l + 2, l + 3, l + 4, l + 5, l + 6, l + 7));
  // All ones in the lanes whose low word wrapped (unsigned w0 < lo, compared with the sign bits
  // flipped); subtracting them adds one to the high word there.
  const Vec sign = splat(0x80000000u);
  const Vec carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lo, sign), _mm256_xor_si256(w0, sign));
  w1 = _mm256_sub_epi32(splat(block_hi), carry);
}
inline void store_lanes(uint32_t* p, Vec v) { _mm256_storeu_si256(reinterpret_cast<Vec*>(p), v); }
#endif

// Philox4x32-10 under key (k0, k1) of the kLanes counters (block + l, s0, s1) for lanes l, out
// into (c0, c1, c2, c3)[l]: the 64-bit block number's low and high words, then the stream's. The
// rounds' 32 x 32 -> 64-bit products are written with the vector unit's own multiply of even
// lanes where there is one (the compiler does not find it), else as a loop. The vector paths make
// the counters in registers: written lane by lane into memory and loaded whole, they stalled every
// call on a failed store-to-load forward (16% of the kernel's time in perf on AVX-512).
inline void philox_lanes(uint64_t block, uint32_t s0, uint32_t s1, uint32_t k0, uint32_t k1,
                         uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3) {
#if defined(PSTAR_INIT_VECTOR)
  static_assert(kLanes % kVecLanes == 0, "whole vector registers of counters");
  const Vec m0 = splat(kMul0), m1 = splat(kMul1);
  for (int l = 0; l < kLanes; l += kVecLanes) {
    Vec a0, a1;
    block_words(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), l, a0, a1);
    Vec a2 = splat(s0), a3 = splat(s1);
    uint32_t r0 = k0, r1 = k1;
    for (int round = 0; round < kRounds; ++round) {
      Vec lo0, hi0, lo1, hi1;
      mul_wide(a0, m0, lo0, hi0);
      mul_wide(a2, m1, lo1, hi1);
      a0 = xor3(hi1, a1, splat(r0));
      a1 = lo1;
      a2 = xor3(hi0, a3, splat(r1));
      a3 = lo0;
      r0 += kWeyl0;
      r1 += kWeyl1;
    }
    store_lanes(c0 + l, a0);
    store_lanes(c1 + l, a1);
    store_lanes(c2 + l, a2);
    store_lanes(c3 + l, a3);
  }
#else
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t j = block + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(j);
    c1[l] = static_cast<uint32_t>(j >> 32);
    c2[l] = s0;
    c3[l] = s1;
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = uint64_t{kMul0} * c0[l];
      const uint64_t p1 = uint64_t{kMul1} * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0;
      c1[l] = static_cast<uint32_t>(p1);
      c2[l] = n2;
      c3[l] = static_cast<uint32_t>(p0);
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
#endif
}
#undef PSTAR_INIT_VECTOR

// The standard normals of Philox blocks [block, block + kLanes): element 4 (b - block) + i of z.
void normal_blocks(uint32_t k0, uint32_t k1, uint32_t s0, uint32_t s1, uint64_t block, float* z) {
  alignas(64) uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  philox_lanes(block, s0, s1, k0, k1, c0, c1, c2, c3);
  float a[kLanes], b[kLanes], c[kLanes], d[kLanes];
  for (int l = 0; l < kLanes; ++l) box_muller(c0[l], c1[l], a[l], b[l]);
  for (int l = 0; l < kLanes; ++l) box_muller(c2[l], c3[l], c[l], d[l]);
  for (int l = 0; l < kLanes; ++l) {
    z[4 * l] = a[l];
    z[4 * l + 1] = b[l];
    z[4 * l + 2] = c[l];
    z[4 * l + 3] = d[l];
  }
}

uint16_t low_bits(float v, optim::ParamOutType type) {
  return type == optim::ParamOutType::kBF16 ? optim::bits::f32_to_bf16(v)
                                            : optim::bits::f32_to_f16(v);
}

// Writes n values v(i) to the outputs at offset `at`.
template <typename Value>
void store(const InitWrite& w, int64_t at, int64_t n, Value&& value) {
  if (w.f32 != nullptr)
    for (int64_t i = 0; i < n; ++i) w.f32[at + i] = value(i);
  if (w.low != nullptr) {
    auto* low = static_cast<uint16_t*>(w.low);
    for (int64_t i = 0; i < n; ++i) low[at + i] = low_bits(value(i), w.low_type);
  }
}

}  // namespace

void write_range(uint64_t seed, const InitWrite& w, int64_t begin, int64_t end) {
  const int64_t at = begin - w.begin;  // where element `begin` goes in the outputs
  const int64_t n = end - begin;
  if (n <= 0) return;
  switch (w.init.kind) {
    case ParameterInit::Kind::kZeros:
      store(w, at, n, [](int64_t) { return 0.0f; });
      return;
    case ParameterInit::Kind::kOnes:
      store(w, at, n, [](int64_t) { return 1.0f; });
      return;
    case ParameterInit::Kind::kNormal:
      break;
  }
  const auto k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const auto s0 = static_cast<uint32_t>(w.stream), s1 = static_cast<uint32_t>(w.stream >> 32);
  const auto std = static_cast<float>(w.init.std);
  float z[4 * kLanes];
  for (int64_t i = begin; i < end;) {
    const auto block = static_cast<uint64_t>(i / 4);
    normal_blocks(k0, k1, s0, s1, block, z);
    const auto first = static_cast<int64_t>(block * 4);  // the element z[0] is for
    const int64_t last = std::min(end, first + 4 * kLanes);
    const int64_t skip = i - first;
    store(w, at + (i - begin), last - i, [&](int64_t k) { return z[skip + k] * std; });
    i = last;
  }
}

}  // namespace pstar::model::init_kernel::PSTAR_INIT_ISA
