// The fused host Adam/AdamW kernel of hybrid Adam: one pass over a span of parameters that unscales
// (and clips) the gradient, updates the fp32 master copy and both moments, and writes the
// low-precision parameter copy. Vectorized for AVX-512 and AVX2 and parallel over OpenMP threads.
//
// Note [host adam bit identity]: every implementation (scalar, AVX2, AVX-512) and every thread
// count gives the same bits, because which device or ISA updates a chunk must never change the
// numbers. Each element goes through the same fp32 operations in the same order: the ones LibTorch
// 1.13's CPU kernels perform for torch::optim::Adam/AdamW, fused multiply-adds where its vectorized
// add(alpha) and addcmul use them (std::fma in the scalar kernel, which is correctly rounded with
// or without the instruction), and no other contraction (the three kernel files are compiled with
// -ffp-contract=off). So on a CPU where LibTorch runs its AVX2/AVX-512 kernels the results equal
// LibTorch's bit for bit. The conversions to bf16/fp16 are exact integer recipes or F16C, which
// agree. The one exception is which NaN payload a NaN in master/exp_avg/exp_avg_sq carries; the
// low-precision copy canonicalizes NaN as LibTorch does.
//
// No LibTorch here: the chunk layer hands raw buffers.
#pragma once

#include <cmath>
#include <cstdint>

#include "pstar/base/error.h"

namespace pstar::optim {

// The dtype of a gradient buffer.
enum class GradType { kF32, kBF16, kF16 };
// The low-precision parameter copy to write, or none (fp32 training: the master is the param).
enum class ParamOutType { kNone, kBF16, kF16 };

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  // AdamW (decoupled weight decay) if true, Adam with L2 regularization if false.
  bool decoupled = true;
  // 1-based step count after the increment, for bias correction.
  int64_t step = 1;
};

// One contiguous run of parameters. master, exp_avg and exp_avg_sq are fp32 and updated in place,
// or, where the *_out pointers are set (all three), read there and written to those (Note
// [speculative adam] in engine/hybrid_adam.h: the originals stay as they were); grad is read only;
// param_out is written only (may be null with ParamOutType::kNone). grad may be the same buffer as
// param_out (param/grad reuse): each element is read before it is written. Either way the values
// written are the same bits.
struct AdamSpan {
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const void* grad = nullptr;
  GradType grad_type = GradType::kF32;
  void* param_out = nullptr;
  ParamOutType param_out_type = ParamOutType::kNone;
  int64_t numel = 0;
  // Last, so that the aggregate initialisations above stay valid.
  float* master_out = nullptr;
  float* exp_avg_out = nullptr;
  float* exp_avg_sq_out = nullptr;
  // Where each state is written: in place unless the *_out pointers are set.
  float* master_dst() const { return master_out != nullptr ? master_out : master; }
  float* exp_avg_dst() const { return exp_avg_out != nullptr ? exp_avg_out : exp_avg; }
  float* exp_avg_sq_dst() const { return exp_avg_sq_out != nullptr ? exp_avg_sq_out : exp_avg_sq; }
  // Elements [begin, begin + count) of this span: every pointer set advanced by `begin` of its
  // elements (the buffers may be on any side; nothing is read).
  AdamSpan slice(int64_t begin, int64_t count) const;
};

inline AdamSpan AdamSpan::slice(int64_t begin, int64_t count) const {
  const auto floats = [begin](float* p) { return p != nullptr ? p + begin : nullptr; };
  AdamSpan s = *this;
  s.master = floats(master);
  s.exp_avg = floats(exp_avg);
  s.exp_avg_sq = floats(exp_avg_sq);
  s.master_out = floats(master_out);
  s.exp_avg_out = floats(exp_avg_out);
  s.exp_avg_sq_out = floats(exp_avg_sq_out);
  // The gradient: fp32, bf16 or fp16; the parameter copy: bf16 or fp16 (null with kNone).
  if (grad != nullptr)
    s.grad = static_cast<const char*>(grad) + begin * (grad_type == GradType::kF32 ? 4 : 2);
  if (param_out != nullptr) s.param_out = static_cast<char*>(param_out) + begin * 2;
  s.numel = count;
  return s;
}

// One fused pass: g = grad * grad_scale (grad_scale = clip coefficient / loss scale), then Adam or
// AdamW exactly as torch::optim::Adam/AdamW 1.13 compute it (the same fp32 operations in the same
// order, Note [host adam bit identity]), updating master, exp_avg and exp_avg_sq, and writing the
// param copy rounded to nearest even if requested. Throws ConfigError for invalid hyperparameters
// or buffers.
void host_adam_step(const AdamHyper& hyper, float grad_scale, const AdamSpan& span);

// Note [held parameters] in engine/adam_steps.h: what an update that changes nothing writes, for a
// parameter torch's Adam would skip (its gradient None): the parameter copy rounded from the
// master, as host_adam_step rounds it (under param/grad reuse that buffer holds the gradient), and,
// where the *_out pointers are set, the master and both moments copied there unchanged. Reads no
// gradient.
void host_adam_hold(const AdamSpan& span);

// The sum of squares of the gradient's fp32 values (grad_scale not applied), accumulated in double;
// +inf or NaN if any element is non-finite. Deterministic: the result does not depend on the thread
// count or the ISA (Note [grad sq sum order] in host_adam.cpp).
double grad_sq_sum(const void* grad, GradType grad_type, int64_t numel);

// Note [streaming stores] in host_adam.cpp: whether host_adam_step stores `span`'s outputs (its
// *_out pointers, set) non-temporally on the ISA in use, every thread's range from its first
// element: PSTAR_ADAM_STREAMING is not 0 and the outputs are aligned alike. Speculative Adam
// redirects only such spans (Note [speculative adam] in engine/hybrid_adam.h): otherwise a
// redirected step would read every line it writes, 42 bytes a bf16 parameter instead of 28.
bool redirected_streams(const AdamSpan& span);

// "avx512", "avx2" or "scalar": the implementation in use, the best this CPU supports unless the
// environment variable PSTAR_ADAM_ISA (scalar|avx2|avx512, read once) asks for a lower one.
const char* host_adam_isa();

namespace detail {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* isa_name(Isa isa);
// The best ISA this CPU (and OS) supports.
Isa detected_isa();
// The ISA to use given the value of PSTAR_ADAM_ISA (null or empty: none) and the detected one:
// never above `detected`. Throws ConfigError for an unknown value.
Isa resolve_isa(const char* env_value, Isa detected);
// Tests only: makes later calls in this process use `isa` (clamped to the detected one), or the
// default again when `isa` is null. Returns the ISA now in use. Not thread-safe against running
// kernels.
Isa set_isa_for_testing(const Isa* isa);

// Note [streaming stores] in host_adam.cpp: the first index in [begin, end) from which a vector
// kernel of `lanes` fp32 lanes may store a redirected span's outputs (the *_out pointers set)
// non-temporally, every output aligned for its vector there and a whole vector left; -1 when the
// span is in place, its outputs are not aligned alike, or no whole vector is left.
// -1 also when PSTAR_ADAM_STREAMING=0 (read once; resolve_streaming says what a value means:
// unset, empty or "1" on, "0" off, anything else a ConfigError).
int64_t streaming_begin(const AdamSpan& span, int64_t begin, int64_t end, int lanes);
// The fp32 lanes of one non-temporal group of each ISA's kernel: the scalar kernel's four (SSE),
// AVX2's 8 and AVX-512's 16.
constexpr int kScalarStreamLanes = 4;
int stream_lanes(Isa isa);
bool resolve_streaming(const char* env_value);

// Scalar coefficients of one step, computed in double as LibTorch does and rounded to float where
// LibTorch converts a Scalar to the tensor's dtype.
struct AdamCoeffs {
  float grad_scale;
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;  // -lr / bias_correction1
  float weight_decay;   // Adam (L2): g = g + weight_decay * p
  float decay;          // AdamW: p = p * (1 - lr * weight_decay)
  bool decoupled;
  bool has_weight_decay;
};
// Inline (and this header free of LibTorch) so that the CUDA kernel's launcher, which cannot link
// the engine, computes the step's coefficients with this very code.
inline AdamCoeffs make_adam_coeffs(const AdamHyper& hyper, float grad_scale) {
  // Mirrors torch/csrc/api/src/optim/adam.cpp and adamw.cpp (1.13): the options are doubles, the
  // coefficients are computed in double, and each becomes a float where it meets the tensor.
  const double lr = hyper.lr;
  const double beta1 = hyper.beta1;
  const double beta2 = hyper.beta2;
  const double weight_decay = hyper.weight_decay;
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(hyper.step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(hyper.step));
  AdamCoeffs c;
  c.grad_scale = grad_scale;
  c.beta1 = hyper.beta1;
  c.one_minus_beta1 = static_cast<float>(1 - beta1);
  c.beta2 = hyper.beta2;
  c.one_minus_beta2 = static_cast<float>(1 - beta2);
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = hyper.eps;
  c.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  c.weight_decay = hyper.weight_decay;
  c.decay = static_cast<float>(1 - lr * weight_decay);
  c.decoupled = hyper.decoupled;
  c.has_weight_decay = hyper.weight_decay != 0;
  return c;
}

// The checks (and messages) of torch::optim::AdamOptions on the hyperparameters, plus ours on the
// gradient multiplier and the span length; `who` names the caller ("host Adam", "CUDA Adam").
inline void check_adam_args(const AdamHyper& hyper, float grad_scale, int64_t numel,
                            const char* who) {
  PSTAR_CHECK(hyper.lr >= 0, ConfigError, who, ": invalid learning rate: ", hyper.lr);
  PSTAR_CHECK(hyper.eps >= 0, ConfigError, who, ": invalid epsilon value: ", hyper.eps);
  PSTAR_CHECK(hyper.beta1 >= 0 && hyper.beta1 < 1, ConfigError, who,
              ": invalid beta parameter at index 0: ", hyper.beta1);
  PSTAR_CHECK(hyper.beta2 >= 0 && hyper.beta2 < 1, ConfigError, who,
              ": invalid beta parameter at index 1: ", hyper.beta2);
  PSTAR_CHECK(hyper.weight_decay >= 0, ConfigError, who,
              ": invalid weight_decay value: ", hyper.weight_decay);
  PSTAR_CHECK(hyper.step >= 1, ConfigError, who, ": step must be 1 or more, got ", hyper.step);
  PSTAR_CHECK(std::isfinite(grad_scale), ConfigError, who, ": grad_scale must be finite, got ",
              grad_scale);
  PSTAR_CHECK(numel >= 0, ConfigError, who, ": numel must be >= 0, got ", numel);
}

// Per-ISA kernels over elements [begin, end) of a span (no threading). The AVX2 and AVX-512 ones
// live in their own translation units, compiled for that ISA; call them only when it is supported.
void adam_range_scalar(const AdamCoeffs& c, const AdamSpan& span, int64_t begin, int64_t end);
void adam_range_avx2(const AdamCoeffs& c, const AdamSpan& span, int64_t begin, int64_t end);
void adam_range_avx512(const AdamCoeffs& c, const AdamSpan& span, int64_t begin, int64_t end);

// Note [grad sq sum order]: within one block, element k of the block is added to lane k % 16 of 16
// double accumulators (in order of k), and the lanes are then summed 0..15 in order. Squares of
// fp32 values are exact in double, so this fixes every rounding.
constexpr int kSqSumLanes = 16;
double sq_sum_block_scalar(const void* grad, GradType grad_type, int64_t begin, int64_t end);
double sq_sum_block_avx2(const void* grad, GradType grad_type, int64_t begin, int64_t end);
double sq_sum_block_avx512(const void* grad, GradType grad_type, int64_t begin, int64_t end);

}  // namespace detail

}  // namespace pstar::optim
