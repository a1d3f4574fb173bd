// The fused Adam/AdamW step of one chunk span on a CUDA device: the device-tier counterpart of
// optim::host_adam_step, with the same hyperparameters, the same buffers (device pointers here) and
// the same bits (Note [cuda adam bit identity] in src/cuda/adam_element.h).
#pragma once

#include <cstdint>

#include "pstar/optim/host_adam.h"

struct CUstream_st;

namespace pstar::cuda {

class Stream;

// optim::AdamSpan with device pointers; a type of its own so that a host span cannot be passed by
// mistake. master, exp_avg and exp_avg_sq are fp32 and updated in place; grad is read only;
// param_out is written only (null with ParamOutType::kNone). grad may be the same buffer as
// param_out (param/grad reuse), as in host_adam_step; no other buffers may overlap.
struct AdamSpanDevice {
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const void* grad = nullptr;
  optim::GradType grad_type = optim::GradType::kF32;
  void* param_out = nullptr;
  optim::ParamOutType param_out_type = optim::ParamOutType::kNone;
  int64_t numel = 0;
};

// Queues one fused pass on `stream` and returns: g = grad * grad_multiplier (clip coefficient /
// loss scale), weight decay (decoupled for AdamW, L2 for Adam), both moments, bias correction and
// eps exactly as optim::host_adam_step computes them, the master updated in place and, if asked,
// its bf16/fp16 copy (round to nearest even) written to param_out. The same hyperparameter checks
// as host_adam_step (ConfigError), and ConfigError for a null or misaligned buffer (4 bytes for
// fp32, 2 for 16-bit). numel == 0 queues nothing. Throws InternalError if the launch fails.
// `stream` is a cudaStream_t of the current device, e.g. LibTorch's current stream (nullptr is the
// legacy default stream); the Stream& overload passes stream.native().
void adam_step(const AdamSpanDevice& span, const optim::AdamHyper& hyper, float grad_multiplier,
               CUstream_st* stream);
void adam_step(const AdamSpanDevice& span, const optim::AdamHyper& hyper, float grad_multiplier,
               Stream& stream);

namespace detail {

// Whether adam_step takes the vectorized path for this span (every buffer 16-byte aligned, 8 for
// 16-bit ones): 4 elements per thread with 16-byte loads. Otherwise one element per thread; both
// give the same bits. For tests and the benchmark.
bool adam_vectorized(const AdamSpanDevice& span);

}  // namespace detail

}  // namespace pstar::cuda
