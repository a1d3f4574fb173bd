// The AVX-512 (F, BW, VL) + F16C host Adam kernels, 16 fp32 lanes, tails through masked loads and
// stores. Compiled with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c -ffp-contract=off and called
// only on CPUs that have them. Each lane computes exactly what adam_scalar_impl in host_adam.cpp
// computes (Note [host adam bit identity]).
//
// This file includes no standard library header with inline functions: a copy of one compiled
// here for AVX-512 could be the one the linker keeps for the baseline code.
//
// GCC 12 warns inside its own AVX-512 headers, whose _mm512_undefined_* helpers initialize a
// variable from itself (GCC bug 105593); the pragma must precede the include to cover them.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "pstar/optim/host_adam.h"

namespace pstar::optim::detail {
namespace {

constexpr int kLanes = 16;

enum WdMode { kNoWd, kL2, kDecoupled };

struct Consts {
  __m512 grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps,
      neg_step_size, weight_decay, decay;
  explicit Consts(const AdamCoeffs& c)
      : grad_scale(_mm512_set1_ps(c.grad_scale)),
        beta1(_mm512_set1_ps(c.beta1)),
        one_minus_beta1(_mm512_set1_ps(c.one_minus_beta1)),
        beta2(_mm512_set1_ps(c.beta2)),
        one_minus_beta2(_mm512_set1_ps(c.one_minus_beta2)),
        bias_correction2_sqrt(_mm512_set1_ps(c.bias_correction2_sqrt)),
        eps(_mm512_set1_ps(c.eps)),
        neg_step_size(_mm512_set1_ps(c.neg_step_size)),
        weight_decay(_mm512_set1_ps(c.weight_decay)),
        decay(_mm512_set1_ps(c.decay)) {}
};

// Loads lanes [i, i + 16) of the gradient as fp32; lanes outside `mask` read as zero and touch no
// memory.
template <GradType G>
__m512 load_grad(const void* grad, int64_t i, __mmask16 mask) {
  if constexpr (G == GradType::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(grad) + i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(grad) + i);
    if constexpr (G == GradType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// Round to nearest even; NaN becomes 0x7FC0 (as f32_to_bf16 in host_adam.cpp).
__m256i to_bf16(__m512 p) {
  const __m512i x = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

// F16C rounds to nearest even; a NaN is first replaced by sign | quiet NaN with no payload, which
// becomes sign | 0x7E00 (as f32_to_f16 in host_adam.cpp).
__m256i to_f16(__m512 p) {
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(p), _mm512_set1_epi32(INT32_MIN));
  const __m512i quiet = _mm512_or_si512(sign, _mm512_set1_epi32(0x7FC00000));
  const __m512 fixed = _mm512_mask_mov_ps(p, nan, _mm512_castsi512_ps(quiet));
  return _mm512_cvtps_ph(fixed, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

template <int kWd>
void adam_lanes(const Consts& k, __m512 grad, __m512& p, __m512& m, __m512& v) {
  __m512 g = _mm512_mul_ps(grad, k.grad_scale);
  if constexpr (kWd == kDecoupled) p = _mm512_mul_ps(p, k.decay);
  if constexpr (kWd == kL2) g = _mm512_fmadd_ps(p, k.weight_decay, g);
  m = _mm512_fmadd_ps(g, k.one_minus_beta1, _mm512_mul_ps(m, k.beta1));
  v = _mm512_fmadd_ps(_mm512_mul_ps(k.one_minus_beta2, g), g, _mm512_mul_ps(v, k.beta2));
  const __m512 denom =
      _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), k.bias_correction2_sqrt), k.eps);
  p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(k.neg_step_size, m), denom));
}

// Lanes [i, i + 16) within `mask`: ordinary masked stores, or (kStream, whole vectors only)
// non-temporal aligned ones (Note [streaming stores] in host_adam.cpp).
template <GradType G, ParamOutType P, int kWd, bool kStream>
void adam_lanes_at(const Consts& k, const AdamSpan& s, int64_t i, __mmask16 mask) {
  __m512 p = _mm512_maskz_loadu_ps(mask, s.master + i);
  __m512 m = _mm512_maskz_loadu_ps(mask, s.exp_avg + i);
  __m512 v = _mm512_maskz_loadu_ps(mask, s.exp_avg_sq + i);
  adam_lanes<kWd>(k, load_grad<G>(s.grad, i, mask), p, m, v);
  __m256i half = _mm256_setzero_si256();
  if constexpr (P == ParamOutType::kBF16) half = to_bf16(p);
  if constexpr (P == ParamOutType::kF16) half = to_f16(p);
  uint16_t* out = static_cast<uint16_t*>(s.param_out) + i;
  if constexpr (kStream) {
    _mm512_stream_ps(s.master_dst() + i, p);
    _mm512_stream_ps(s.exp_avg_dst() + i, m);
    _mm512_stream_ps(s.exp_avg_sq_dst() + i, v);
    if constexpr (P != ParamOutType::kNone)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out), half);
  } else {
    _mm512_mask_storeu_ps(s.master_dst() + i, mask, p);
    _mm512_mask_storeu_ps(s.exp_avg_dst() + i, mask, m);
    _mm512_mask_storeu_ps(s.exp_avg_sq_dst() + i, mask, v);
    if constexpr (P != ParamOutType::kNone) _mm256_mask_storeu_epi16(out, mask, half);
  }
}

__mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

template <GradType G, ParamOutType P, int kWd>
void adam_impl(const AdamCoeffs& c, const AdamSpan& s, int64_t begin, int64_t end) {
  const Consts k(c);
  int64_t i = begin;
  // A redirected span's outputs are stored non-temporally from the first index where all of them
  // are aligned (Note [streaming stores] in host_adam.cpp); the fewer than 16 before it,
  // ordinarily.
  const int64_t stream = streaming_begin(s, begin, end, kLanes);
  if (stream >= 0) {
    if (stream > i) adam_lanes_at<G, P, kWd, false>(k, s, i, first_lanes(stream - i));
    for (i = stream; i + kLanes <= end; i += kLanes)
      adam_lanes_at<G, P, kWd, true>(k, s, i, 0xFFFF);
    _mm_sfence();
  }
  for (; i + kLanes <= end; i += kLanes) adam_lanes_at<G, P, kWd, false>(k, s, i, 0xFFFF);
  const int64_t rest = end - i;
  if (rest > 0) adam_lanes_at<G, P, kWd, false>(k, s, i, first_lanes(rest));
}

template <GradType G, ParamOutType P>
void adam_wd(const AdamCoeffs& c, const AdamSpan& s, int64_t begin, int64_t end) {
  if (!c.has_weight_decay) {
    adam_impl<G, P, kNoWd>(c, s, begin, end);
  } else if (c.decoupled) {
    adam_impl<G, P, kDecoupled>(c, s, begin, end);
  } else {
    adam_impl<G, P, kL2>(c, s, begin, end);
  }
}

template <GradType G>
void adam_out(const AdamCoeffs& c, const AdamSpan& s, int64_t begin, int64_t end) {
  switch (s.param_out_type) {
    case ParamOutType::kNone:
      return adam_wd<G, ParamOutType::kNone>(c, s, begin, end);
    case ParamOutType::kBF16:
      return adam_wd<G, ParamOutType::kBF16>(c, s, begin, end);
    case ParamOutType::kF16:
      return adam_wd<G, ParamOutType::kF16>(c, s, begin, end);
  }
}

// 16 elements into the 16 lanes of Note [grad sq sum order]: two accumulators of 8 doubles. Masked
// lanes load as +0.0, and adding +0.0 leaves a lane unchanged.
template <GradType G>
void sq_accumulate(const void* grad, int64_t i, __mmask16 mask, __m512d& acc0, __m512d& acc1) {
  const __m512 f = load_grad<G>(grad, i, mask);
  const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
  const __m512d d1 =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
  acc0 = _mm512_add_pd(acc0, _mm512_mul_pd(d0, d0));
  acc1 = _mm512_add_pd(acc1, _mm512_mul_pd(d1, d1));
}

template <GradType G>
double sq_sum_impl(const void* grad, int64_t begin, int64_t end) {
  static_assert(kSqSumLanes == kLanes, "the lane recipe takes one vector a step");
  __m512d acc0 = _mm512_setzero_pd();
  __m512d acc1 = _mm512_setzero_pd();
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) sq_accumulate<G>(grad, i, 0xFFFF, acc0, acc1);
  const int64_t rest = end - i;
  if (rest > 0) {
    sq_accumulate<G>(grad, i, first_lanes(rest), acc0, acc1);
  }
  alignas(64) double lanes[kSqSumLanes];
  _mm512_store_pd(lanes, acc0);
  _mm512_store_pd(lanes + 8, acc1);
  double sum = 0.0;
  for (int j = 0; j < kSqSumLanes; ++j) sum += lanes[j];
  return sum;
}

}  // namespace

void adam_range_avx512(const AdamCoeffs& c, const AdamSpan& span, int64_t begin, int64_t end) {
  switch (span.grad_type) {
    case GradType::kF32:
      return adam_out<GradType::kF32>(c, span, begin, end);
    case GradType::kBF16:
      return adam_out<GradType::kBF16>(c, span, begin, end);
    case GradType::kF16:
      return adam_out<GradType::kF16>(c, span, begin, end);
  }
}

double sq_sum_block_avx512(const void* grad, GradType grad_type, int64_t begin, int64_t end) {
  switch (grad_type) {
    case GradType::kF32:
      return sq_sum_impl<GradType::kF32>(grad, begin, end);
    case GradType::kBF16:
      return sq_sum_impl<GradType::kBF16>(grad, begin, end);
    case GradType::kF16:
      return sq_sum_impl<GradType::kF16>(grad, begin, end);
  }
  return 0.0;
}

}  // namespace pstar::optim::detail
