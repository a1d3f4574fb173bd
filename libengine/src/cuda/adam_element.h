// The per-element arithmetic of the CUDA Adam kernel, written once for the device (nvcc) and the
// host (any C++17 compiler), so that a machine without a GPU can check it against host Adam.
//
// Note [cuda adam bit identity]: the kernel must give the bits optim::host_adam_step gives (Note
// [host adam bit identity] in pstar/optim/host_adam.h), so that moving a chunk's Adam between the
// host and the device never changes the numbers. Each element goes through the host's fp32
// operations in the host's order: the same two or three fused multiply-adds (the moments, and the
// L2 term), every other multiply, add, divide and square root rounded on its own. IEEE fp32
// multiply, add, fma, divide and square root are correctly rounded on both sides, so the same
// sequence gives the same bits, provided that
// - nothing is contracted: nvcc fuses a * b + c into one FMA by default (-fmad=true), which rounds
//   once where the host rounds twice. So every operation is an explicit round-to-nearest
//   intrinsic (__fmul_rn, __fadd_rn, __fmaf_rn, __fdiv_rn, __fsqrt_rn), which nvcc never fuses,
//   and adam_kernel.cu is compiled with -fmad=false besides;
// - division and square root are IEEE ones, not the approximations of -prec-div=false or
//   -prec-sqrt=false (the _rn intrinsics are exact whatever the flags);
// - denormals are kept (-ftz=false), as the host keeps them with its default MXCSR;
// - the conversions are the host's integer recipes (below), not cvt instructions, whose NaN
//   results differ (the host makes every NaN bf16 0x7FC0 and every NaN fp16 sign | 0x7E00).
// What can differ: NaN payloads and signs in master/exp_avg/exp_avg_sq (a GPU's default NaN is
// 0x7FFFFFFF, x86's 0xFFC00000; the host documents payloads as unspecified too), and so the sign of
// an fp16 copy of a NaN. Finite results, infinities and bf16 copies agree.
//
// The host side of this file exists for tests (tests/engine/cuda/adam_emulation_test.cpp), which
// compile it with -ffp-contract=off, as the host Adam's own files are.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pstar/optim/float_bits.h"
#include "pstar/optim/host_adam.h"

namespace pstar::cuda::detail {

PSTAR_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

PSTAR_HOST_DEVICE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

PSTAR_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

PSTAR_HOST_DEVICE float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// a * b + c rounded once.
PSTAR_HOST_DEVICE float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// The conversions of host Adam, shared (pstar/optim/float_bits.h).
using optim::bits::bf16_to_f32;
using optim::bits::bits_f32;
using optim::bits::f16_to_f32;
using optim::bits::f32_bits;
using optim::bits::f32_to_bf16;
using optim::bits::f32_to_f16;

template <optim::GradType G>
PSTAR_HOST_DEVICE float grad_to_f32(const void* grad, int64_t i) {
  if constexpr (G == optim::GradType::kF32) {
    return static_cast<const float*>(grad)[i];
  } else if constexpr (G == optim::GradType::kBF16) {
    return bf16_to_f32(static_cast<const uint16_t*>(grad)[i]);
  } else {
    return f16_to_f32(static_cast<const uint16_t*>(grad)[i]);
  }
}

template <optim::ParamOutType P>
PSTAR_HOST_DEVICE uint16_t param_bits(float p) {
  if constexpr (P == optim::ParamOutType::kBF16) {
    return f32_to_bf16(p);
  } else {
    return f32_to_f16(p);
  }
}

enum class WeightDecay { kNone, kL2, kDecoupled };

// One element of one step: adam_scalar_impl in host_adam.cpp, operation for operation. `grad` is
// the gradient as fp32 (before grad_scale); p, m and v are the master, exp_avg and exp_avg_sq.
template <WeightDecay W>
PSTAR_HOST_DEVICE void adam_element(const optim::detail::AdamCoeffs& c, float grad, float& p,
                                    float& m, float& v) {
  float g = mul_rn(grad, c.grad_scale);
  if constexpr (W == WeightDecay::kDecoupled) p = mul_rn(p, c.decay);
  if constexpr (W == WeightDecay::kL2) g = fma_rn(p, c.weight_decay, g);
  m = fma_rn(g, c.one_minus_beta1, mul_rn(m, c.beta1));
  v = fma_rn(mul_rn(c.one_minus_beta2, g), g, mul_rn(v, c.beta2));
  const float denom = add_rn(div_rn(sqrt_rn(v), c.bias_correction2_sqrt), c.eps);
  p = add_rn(p, div_rn(mul_rn(c.neg_step_size, m), denom));
}

}  // namespace pstar::cuda::detail
