// The AVX2 + FMA + F16C host Adam kernels, 8 fp32 lanes. Compiled with -mavx2 -mfma -mf16c
// -ffp-contract=off and called only on CPUs that have them. Each lane computes exactly what
// adam_scalar_impl in host_adam.cpp computes (Note [host adam bit identity]).
//
// This file includes no standard library header with inline functions: a copy of one compiled
// here for AVX2 could be the one the linker keeps for the baseline code.
#include <immintrin.h>

#include "pstar/optim/host_adam.h"

namespace pstar::optim::detail {
namespace {

constexpr int kLanes = 8;

enum WdMode { kNoWd, kL2, kDecoupled };

struct Consts {
  __m256 grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps,
      neg_step_size, weight_decay, decay;
  explicit Consts(const AdamCoeffs& c)
      : grad_scale(_mm256_set1_ps(c.grad_scale)),
        beta1(_mm256_set1_ps(c.beta1)),
        one_minus_beta1(_mm256_set1_ps(c.one_minus_beta1)),
        beta2(_mm256_set1_ps(c.beta2)),
        one_minus_beta2(_mm256_set1_ps(c.one_minus_beta2)),
        bias_correction2_sqrt(_mm256_set1_ps(c.bias_correction2_sqrt)),
        eps(_mm256_set1_ps(c.eps)),
        neg_step_size(_mm256_set1_ps(c.neg_step_size)),
        weight_decay(_mm256_set1_ps(c.weight_decay)),
        decay(_mm256_set1_ps(c.decay)) {}
};

template <GradType G>
__m256 load_grad(const void* grad, int64_t i) {
  if constexpr (G == GradType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(grad) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(grad) + i));
    if constexpr (G == GradType::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// Round to nearest even; NaN becomes 0x7FC0 (as f32_to_bf16 in host_adam.cpp).
__m128i to_bf16(__m256 p) {
  const __m256i x = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// F16C rounds to nearest even; a NaN is first replaced by sign | quiet NaN with no payload, which
// F16C turns into sign | 0x7E00 (as f32_to_f16 in host_adam.cpp).
__m128i to_f16(__m256 p) {
  const __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
  const __m256 sign = _mm256_and_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 quiet = _mm256_or_ps(sign, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)));
  return _mm256_cvtps_ph(_mm256_blendv_ps(p, quiet, nan),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

template <int kWd>
void adam_lanes(const Consts& k, __m256 grad, __m256& p, __m256& m, __m256& v) {
  __m256 g = _mm256_mul_ps(grad, k.grad_scale);
  if constexpr (kWd == kDecoupled) p = _mm256_mul_ps(p, k.decay);
  if constexpr (kWd == kL2) g = _mm256_fmadd_ps(p, k.weight_decay, g);
  m = _mm256_fmadd_ps(g, k.one_minus_beta1, _mm256_mul_ps(m, k.beta1));
  v = _mm256_fmadd_ps(_mm256_mul_ps(k.one_minus_beta2, g), g, _mm256_mul_ps(v, k.beta2));
  const __m256 denom =
      _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), k.bias_correction2_sqrt), k.eps);
  p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(k.neg_step_size, m), denom));
}

// Lanes [i, i + 8): ordinary unaligned stores, or non-temporal aligned ones (Note [streaming
// stores] in host_adam.cpp).
template <GradType G, ParamOutType P, int kWd, bool kStream>
void adam_lanes_at(const Consts& k, const AdamSpan& s, int64_t i) {
  __m256 p = _mm256_loadu_ps(s.master + i);
  __m256 m = _mm256_loadu_ps(s.exp_avg + i);
  __m256 v = _mm256_loadu_ps(s.exp_avg_sq + i);
  adam_lanes<kWd>(k, load_grad<G>(s.grad, i), p, m, v);
  __m128i half = _mm_setzero_si128();
  if constexpr (P == ParamOutType::kBF16) half = to_bf16(p);
  if constexpr (P == ParamOutType::kF16) half = to_f16(p);
  auto* out = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(s.param_out) + i);
  if constexpr (kStream) {
    _mm256_stream_ps(s.master_dst() + i, p);
    _mm256_stream_ps(s.exp_avg_dst() + i, m);
    _mm256_stream_ps(s.exp_avg_sq_dst() + i, v);
    if constexpr (P != ParamOutType::kNone) _mm_stream_si128(out, half);
  } else {
    _mm256_storeu_ps(s.master_dst() + i, p);
    _mm256_storeu_ps(s.exp_avg_dst() + i, m);
    _mm256_storeu_ps(s.exp_avg_sq_dst() + i, v);
    if constexpr (P != ParamOutType::kNone) _mm_storeu_si128(out, half);
  }
}

// Fewer than 8 elements [i, end) through the same lanes via zero-padded copies (zeros compute
// harmlessly).
template <GradType G, ParamOutType P, int kWd>
void adam_partial(const Consts& k, const AdamSpan& s, int64_t i, int64_t end) {
  const int64_t rest = end - i;
  if (rest <= 0) return;
  const float* master = s.master;
  const float* exp_avg = s.exp_avg;
  const float* exp_avg_sq = s.exp_avg_sq;
  alignas(32) float pb[kLanes] = {}, mb[kLanes] = {}, vb[kLanes] = {}, gf[kLanes] = {};
  alignas(16) uint16_t gh[kLanes] = {}, ob[kLanes] = {};
  for (int64_t j = 0; j < rest; ++j) {
    pb[j] = master[i + j];
    mb[j] = exp_avg[i + j];
    vb[j] = exp_avg_sq[i + j];
    if constexpr (G == GradType::kF32) {
      gf[j] = static_cast<const float*>(s.grad)[i + j];
    } else {
      gh[j] = static_cast<const uint16_t*>(s.grad)[i + j];
    }
  }
  __m256 p = _mm256_load_ps(pb);
  __m256 m = _mm256_load_ps(mb);
  __m256 v = _mm256_load_ps(vb);
  __m256 grad;
  if constexpr (G == GradType::kF32) {
    grad = load_grad<G>(gf, 0);
  } else {
    grad = load_grad<G>(gh, 0);
  }
  adam_lanes<kWd>(k, grad, p, m, v);
  _mm256_store_ps(pb, p);
  _mm256_store_ps(mb, m);
  _mm256_store_ps(vb, v);
  if constexpr (P == ParamOutType::kBF16)
    _mm_store_si128(reinterpret_cast<__m128i*>(ob), to_bf16(p));
  if constexpr (P == ParamOutType::kF16) _mm_store_si128(reinterpret_cast<__m128i*>(ob), to_f16(p));
  float* master_dst = s.master_dst();
  float* exp_avg_dst = s.exp_avg_dst();
  float* exp_avg_sq_dst = s.exp_avg_sq_dst();
  uint16_t* out = static_cast<uint16_t*>(s.param_out);
  for (int64_t j = 0; j < rest; ++j) {
    master_dst[i + j] = pb[j];
    exp_avg_dst[i + j] = mb[j];
    exp_avg_sq_dst[i + j] = vb[j];
    if constexpr (P != ParamOutType::kNone) out[i + j] = ob[j];
  }
}

template <GradType G, ParamOutType P, int kWd>
void adam_impl(const AdamCoeffs& c, const AdamSpan& s, int64_t begin, int64_t end) {
  const Consts k(c);
  int64_t i = begin;
  // A redirected span's outputs are stored non-temporally from the first index where all of them
  // are aligned (Note [streaming stores] in host_adam.cpp).
  const int64_t stream = streaming_begin(s, begin, end, kLanes);
  if (stream >= 0) {
    adam_partial<G, P, kWd>(k, s, i, stream);
    for (i = stream; i + kLanes <= end; i += kLanes) adam_lanes_at<G, P, kWd, true>(k, s, i);
    _mm_sfence();
  }
  for (; i + kLanes <= end; i += kLanes) adam_lanes_at<G, P, kWd, false>(k, s, i);
  adam_partial<G, P, kWd>(k, s, i, end);
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

// 16 elements into the 16 lanes of Note [grad sq sum order]: four accumulators of 4 doubles.
void sq_accumulate(__m256 lo, __m256 hi, __m256d acc[4]) {
  const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(lo));
  const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1));
  const __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(hi));
  const __m256d d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1));
  acc[0] = _mm256_add_pd(acc[0], _mm256_mul_pd(d0, d0));
  acc[1] = _mm256_add_pd(acc[1], _mm256_mul_pd(d1, d1));
  acc[2] = _mm256_add_pd(acc[2], _mm256_mul_pd(d2, d2));
  acc[3] = _mm256_add_pd(acc[3], _mm256_mul_pd(d3, d3));
}

template <GradType G>
double sq_sum_impl(const void* grad, int64_t begin, int64_t end) {
  static_assert(kSqSumLanes == 2 * kLanes, "the lane recipe takes two vectors a step");
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int64_t i = begin;
  for (; i + kSqSumLanes <= end; i += kSqSumLanes) {
    sq_accumulate(load_grad<G>(grad, i), load_grad<G>(grad, i + kLanes), acc);
  }
  const int64_t rest = end - i;
  if (rest > 0) {
    // Zero padding adds +0.0 to a lane, which leaves it unchanged.
    alignas(32) float gf[kSqSumLanes] = {};
    alignas(32) uint16_t gh[kSqSumLanes] = {};
    for (int64_t j = 0; j < rest; ++j) {
      if constexpr (G == GradType::kF32) {
        gf[j] = static_cast<const float*>(grad)[i + j];
      } else {
        gh[j] = static_cast<const uint16_t*>(grad)[i + j];
      }
    }
    if constexpr (G == GradType::kF32) {
      sq_accumulate(load_grad<G>(gf, 0), load_grad<G>(gf, kLanes), acc);
    } else {
      sq_accumulate(load_grad<G>(gh, 0), load_grad<G>(gh, kLanes), acc);
    }
  }
  alignas(32) double lanes[kSqSumLanes];
  for (int a = 0; a < 4; ++a) _mm256_store_pd(lanes + 4 * a, acc[a]);
  double sum = 0.0;
  for (int j = 0; j < kSqSumLanes; ++j) sum += lanes[j];
  return sum;
}

}  // namespace

void adam_range_avx2(const AdamCoeffs& c, const AdamSpan& span, int64_t begin, int64_t end) {
  switch (span.grad_type) {
    case GradType::kF32:
      return adam_out<GradType::kF32>(c, span, begin, end);
    case GradType::kBF16:
      return adam_out<GradType::kBF16>(c, span, begin, end);
    case GradType::kF16:
      return adam_out<GradType::kF16>(c, span, begin, end);
  }
}

double sq_sum_block_avx2(const void* grad, GradType grad_type, int64_t begin, int64_t end) {
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
