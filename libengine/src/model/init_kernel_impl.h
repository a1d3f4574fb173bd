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
// which the compiler vectorises.
constexpr int kLanes = 16;

// Philox4x32's multipliers and key increments (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011).
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

// ln(u) for u in [2^-32, 1]: u = 2^e * m with m in (sqrt(2)/2, sqrt(2)], ln m = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| <= 0.172, whose series to s^9 is exact to about 1e-9.
inline float log_unit(float u) {
  const uint32_t b = f32_bits(u);
  const uint32_t mantissa = b & 0x7FFFFFu;
  // All ones where the mantissa is above sqrt(2)'s (0x3504F3): halve m, add one to e.
  const uint32_t above = 0u - static_cast<uint32_t>(mantissa > 0x3504F3u);
  const float m = bits_f32(mantissa | (0x3F800000u - (above & 0x00800000u)));
  const int32_t e = static_cast<int32_t>(b >> 23) - 127 - static_cast<int32_t>(above);
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  float p = s2 * (1.0f / 9.0f) + (1.0f / 7.0f);
  p = p * s2 + (1.0f / 5.0f);
  p = p * s2 + (1.0f / 3.0f);
  p = p * s2 + 1.0f;
  return static_cast<float>(e) * 0.693147180559945f + 2.0f * s * p;
}

// ln(1 - t) for t in (0, 0.3]: 2 atanh(s) with s = -t / (2 - t), |s| <= 0.177, computed from t
// itself, so that it keeps t's relative precision where 1 - t would round it away.
inline float log_one_minus(float t) {
  const float s = -t / (2.0f - t);
  const float s2 = s * s;
  float p = s2 * (1.0f / 9.0f) + (1.0f / 7.0f);
  p = p * s2 + (1.0f / 5.0f);
  p = p * s2 + (1.0f / 3.0f);
  p = p * s2 + 1.0f;
  return 2.0f * s * p;
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
  const uint32_t ln_u =
      (f32_bits(log_unit(u)) & ~near_one) | (f32_bits(log_one_minus(rest)) & near_one);
  const float r = __builtin_sqrtf(-2.0f * bits_f32(ln_u));
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

// The standard normals of Philox blocks [block, block + kLanes): element 4 (b - block) + i of z.
void normal_blocks(uint32_t k0, uint32_t k1, uint32_t s0, uint32_t s1, uint64_t block, float* z) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
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
