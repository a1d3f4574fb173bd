// fp32 <-> bf16/fp16 conversions as bit recipes, shared by host Adam (host_adam.cpp) and the CUDA
// Adam kernel (src/cuda/adam_element.h), so both round exactly alike. Header-only and free of
// LibTorch; under nvcc every function is __host__ __device__.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PSTAR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PSTAR_HOST_DEVICE inline
#endif

namespace pstar::optim::bits {

PSTAR_HOST_DEVICE uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

PSTAR_HOST_DEVICE float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

PSTAR_HOST_DEVICE float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN becomes 0x7FC0, as c10::BFloat16 does.
PSTAR_HOST_DEVICE uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// What F16C's vcvtph2ps does: exact, and a NaN keeps its payload with the quiet bit set.
PSTAR_HOST_DEVICE float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {
    const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return bits_f32(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in fp32.
    return bits_f32(sign | f32_bits(static_cast<float>(mantissa) * 0x1p-24f));
  }
  return bits_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Round to nearest even, as F16C's vcvtps2ph does for non-NaN values; NaN becomes sign | 0x7E00, as
// c10::Half does (the vector kernels make F16C give the same).
PSTAR_HOST_DEVICE uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  // 65520 and above round to infinity (65504 is the largest half; the tie goes to even = inf).
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal half, mantissa = round(|f| * 2^24).
    const uint32_t e = ax >> 23;
    if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits; a carry into the
  // exponent is the right result.
  uint32_t r = ax - 0x38000000u;
  r += 0xFFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

}  // namespace pstar::optim::bits
