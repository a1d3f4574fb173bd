// adam_step's checks and coefficients, on the host. Compiled with -ffp-contract=off, as host Adam's
// make_adam_coeffs is (sources.cmake).
#include <cmath>
#include <cstdint>

#include "adam_launch.h"
#include "pstar/base/error.h"
#include "pstar/cuda/adam.h"
#include "pstar/cuda/stream.h"

namespace pstar::cuda {
namespace detail {
namespace {

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

uintptr_t grad_bytes(optim::GradType type) { return type == optim::GradType::kF32 ? 4 : 2; }

}  // namespace

bool adam_vectorized(const AdamSpanDevice& span) {
  // 4 elements per thread: 16 bytes of each fp32 buffer, 8 of each 16-bit one.
  const uintptr_t g = grad_bytes(span.grad_type) * 4;
  return aligned(span.master, 16) && aligned(span.exp_avg, 16) && aligned(span.exp_avg_sq, 16) &&
         aligned(span.grad, g) && aligned(span.param_out, 8);
}

}  // namespace detail

void adam_step(const AdamSpanDevice& span, const optim::AdamHyper& hyper, float grad_multiplier,
               CUstream_st* stream) {
  // host_adam_step's checks, with their messages.
  optim::detail::check_adam_args(hyper, grad_multiplier, span.numel, "CUDA Adam");
  const auto g = span.grad_type;
  PSTAR_CHECK(
      g == optim::GradType::kF32 || g == optim::GradType::kBF16 || g == optim::GradType::kF16,
      ConfigError, "CUDA Adam: invalid grad_type ", static_cast<int>(g));
  const auto p = span.param_out_type;
  PSTAR_CHECK(p == optim::ParamOutType::kNone || p == optim::ParamOutType::kBF16 ||
                  p == optim::ParamOutType::kF16,
              ConfigError, "CUDA Adam: invalid param_out_type ", static_cast<int>(p));
  if (span.numel == 0) return;
  PSTAR_CHECK(span.master != nullptr && span.exp_avg != nullptr && span.exp_avg_sq != nullptr &&
                  span.grad != nullptr,
              ConfigError, "CUDA Adam: master, exp_avg, exp_avg_sq and grad must not be null");
  if (p == optim::ParamOutType::kNone) {
    PSTAR_CHECK(span.param_out == nullptr, ConfigError,
                "CUDA Adam: param_out is set but param_out_type is kNone");
  } else {
    PSTAR_CHECK(span.param_out != nullptr, ConfigError,
                "CUDA Adam: param_out_type asks for a param copy but param_out is null");
  }
  PSTAR_CHECK(detail::aligned(span.master, 4) && detail::aligned(span.exp_avg, 4) &&
                  detail::aligned(span.exp_avg_sq, 4) &&
                  detail::aligned(span.grad, detail::grad_bytes(g)) &&
                  detail::aligned(span.param_out, 2),
              ConfigError, "CUDA Adam: a buffer is not aligned to its element size");
  detail::launch_adam(optim::detail::make_adam_coeffs(hyper, grad_multiplier), span,
                      detail::adam_vectorized(span), stream);
}

void adam_step(const AdamSpanDevice& span, const optim::AdamHyper& hyper, float grad_multiplier,
               Stream& stream) {
  adam_step(span, hyper, grad_multiplier, stream.native());
}

}  // namespace pstar::cuda
