// The fused Adam/AdamW kernels of pstar::cuda::adam_step. Every element is computed by
// adam_element (adam_element.h), which spells out host Adam's operations with round-to-nearest
// intrinsics (Note [cuda adam bit identity]); this file only moves the data. Compiled with
// -fmad=false -ftz=false -prec-div=true -prec-sqrt=true (sources.cmake).
//
// Two kernels per case: one element per thread, for spans at any (element-aligned) address, and
// four per thread with 16-byte loads (8-byte for 16-bit buffers) when every buffer is aligned for
// them, which chunk payloads are unless a tensor starts at an odd offset. Both are grid-stride
// loops, memory-bound: the bytes moved per element are 24 (master, exp_avg, exp_avg_sq read and
// written) + the gradient read + the parameter copy written.
#include <cuda_runtime.h>

#include <cstdint>

#include "adam_element.h"
#include "adam_launch.h"
#include "check.h"

namespace pstar::cuda::detail {
namespace {

using optim::GradType;
using optim::ParamOutType;

constexpr int kThreads = 256;
// Larger spans loop (grid-stride): 4096 blocks of 256 threads are several waves on any GPU
// (an H100 holds 132 x 2048 threads at once), so more blocks would only add scheduling.
constexpr int64_t kMaxBlocks = 4096;

struct Buffers {
  float* __restrict__ master;
  float* __restrict__ exp_avg;
  float* __restrict__ exp_avg_sq;
  // grad and param_out may be one buffer (param/grad reuse): neither is __restrict__, and every
  // element of grad is read before the same element of param_out is written, by the same thread.
  const void* grad;
  void* param_out;
};

template <GradType G, ParamOutType P, WeightDecay W>
__device__ __forceinline__ void adam_at(const optim::detail::AdamCoeffs& c, const Buffers& b,
                                        int64_t i) {
  const float g = grad_to_f32<G>(b.grad, i);
  float p = b.master[i];
  float m = b.exp_avg[i];
  float v = b.exp_avg_sq[i];
  adam_element<W>(c, g, p, m, v);
  b.master[i] = p;
  b.exp_avg[i] = m;
  b.exp_avg_sq[i] = v;
  if constexpr (P != ParamOutType::kNone) {
    static_cast<uint16_t*>(b.param_out)[i] = param_bits<P>(p);
  }
}

template <GradType G, ParamOutType P, WeightDecay W>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(const optim::detail::AdamCoeffs c, const Buffers b, int64_t numel) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < numel;
       i += stride) {
    adam_at<G, P, W>(c, b, i);
  }
}

// Elements [4j, 4j + 4) of the gradient as fp32.
template <GradType G>
__device__ __forceinline__ void load_grad4(const void* grad, int64_t j, float (&out)[4]) {
  if constexpr (G == GradType::kF32) {
    const float4 g = static_cast<const float4*>(grad)[j];
    out[0] = g.x;
    out[1] = g.y;
    out[2] = g.z;
    out[3] = g.w;
  } else {
    // Four 16-bit values, the lower-addressed one in the low half (little-endian).
    const uint2 h = static_cast<const uint2*>(grad)[j];
    const uint16_t bits[4] = {
        static_cast<uint16_t>(h.x & 0xFFFFu), static_cast<uint16_t>(h.x >> 16),
        static_cast<uint16_t>(h.y & 0xFFFFu), static_cast<uint16_t>(h.y >> 16)};
    for (int k = 0; k < 4; ++k) {
      out[k] = G == GradType::kBF16 ? bf16_to_f32(bits[k]) : f16_to_f32(bits[k]);
    }
  }
}

template <ParamOutType P>
__device__ __forceinline__ void store_param4(void* param_out, int64_t j, const float (&p)[4]) {
  uint16_t bits[4];
  for (int k = 0; k < 4; ++k) bits[k] = param_bits<P>(p[k]);
  uint2 h;
  h.x = static_cast<uint32_t>(bits[0]) | (static_cast<uint32_t>(bits[1]) << 16);
  h.y = static_cast<uint32_t>(bits[2]) | (static_cast<uint32_t>(bits[3]) << 16);
  static_cast<uint2*>(param_out)[j] = h;
}

template <GradType G, ParamOutType P, WeightDecay W>
__global__ void __launch_bounds__(kThreads)
    adam_kernel_vec4(const optim::detail::AdamCoeffs c, const Buffers b, int64_t numel) {
  const int64_t groups = numel / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t j = first; j < groups; j += stride) {
    float g[4];
    load_grad4<G>(b.grad, j, g);
    const float4 p4 = reinterpret_cast<const float4*>(b.master)[j];
    const float4 m4 = reinterpret_cast<const float4*>(b.exp_avg)[j];
    const float4 v4 = reinterpret_cast<const float4*>(b.exp_avg_sq)[j];
    float p[4] = {p4.x, p4.y, p4.z, p4.w};
    float m[4] = {m4.x, m4.y, m4.z, m4.w};
    float v[4] = {v4.x, v4.y, v4.z, v4.w};
    for (int k = 0; k < 4; ++k) adam_element<W>(c, g[k], p[k], m[k], v[k]);
    reinterpret_cast<float4*>(b.master)[j] = make_float4(p[0], p[1], p[2], p[3]);
    reinterpret_cast<float4*>(b.exp_avg)[j] = make_float4(m[0], m[1], m[2], m[3]);
    reinterpret_cast<float4*>(b.exp_avg_sq)[j] = make_float4(v[0], v[1], v[2], v[3]);
    if constexpr (P != ParamOutType::kNone) store_param4<P>(b.param_out, j, p);
  }
  // The last numel % 4 elements, one each for the first threads of the grid.
  const int64_t tail = numel - groups * 4;
  if (first < tail) adam_at<G, P, W>(c, b, groups * 4 + first);
}

template <GradType G, ParamOutType P, WeightDecay W>
void launch(const optim::detail::AdamCoeffs& c, const AdamSpanDevice& s, bool vectorized,
            cudaStream_t stream) {
  const Buffers b{s.master, s.exp_avg, s.exp_avg_sq, s.grad, s.param_out};
  const int64_t work = vectorized ? (s.numel / 4 > 0 ? s.numel / 4 : s.numel) : s.numel;
  int64_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (vectorized) {
    adam_kernel_vec4<G, P, W>
        <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(c, b, s.numel);
  } else {
    adam_kernel<G, P, W><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(c, b, s.numel);
  }
}

template <GradType G, ParamOutType P>
void launch_wd(const optim::detail::AdamCoeffs& c, const AdamSpanDevice& s, bool vectorized,
               cudaStream_t stream) {
  if (!c.has_weight_decay) {
    launch<G, P, WeightDecay::kNone>(c, s, vectorized, stream);
  } else if (c.decoupled) {
    launch<G, P, WeightDecay::kDecoupled>(c, s, vectorized, stream);
  } else {
    launch<G, P, WeightDecay::kL2>(c, s, vectorized, stream);
  }
}

template <GradType G>
void launch_out(const optim::detail::AdamCoeffs& c, const AdamSpanDevice& s, bool vectorized,
                cudaStream_t stream) {
  switch (s.param_out_type) {
    case ParamOutType::kNone:
      return launch_wd<G, ParamOutType::kNone>(c, s, vectorized, stream);
    case ParamOutType::kBF16:
      return launch_wd<G, ParamOutType::kBF16>(c, s, vectorized, stream);
    case ParamOutType::kF16:
      return launch_wd<G, ParamOutType::kF16>(c, s, vectorized, stream);
  }
}

}  // namespace

void launch_adam(const optim::detail::AdamCoeffs& coeffs, const AdamSpanDevice& span,
                 bool vectorized, CUstream_st* stream) {
  switch (span.grad_type) {
    case GradType::kF32:
      launch_out<GradType::kF32>(coeffs, span, vectorized, stream);
      break;
    case GradType::kBF16:
      launch_out<GradType::kBF16>(coeffs, span, vectorized, stream);
      break;
    case GradType::kF16:
      launch_out<GradType::kF16>(coeffs, span, vectorized, stream);
      break;
  }
  PSTAR_CUDA_CHECK(cudaGetLastError(), "launching the CUDA Adam kernel on ", span.numel,
                   " elements");
}

}  // namespace pstar::cuda::detail
