#include "pstar/model/ops.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <torch/autograd.h>
#include <torch/torch.h>

#include "pstar/core/torch_compat.h"

namespace pstar::model {
namespace {

// Note [saved parameter views]
struct Linear : public torch::autograd::Function<Linear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor weight) {
    ctx->save_for_backward({x, weight});
    return torch::matmul(x, weight.t());
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& grad = grads[0];
    auto grad_2d = grad.reshape({-1, grad.size(-1)});
    auto grad_x = torch::matmul(grad, weight);
    auto grad_w = torch::matmul(grad_2d.t(), x.reshape({-1, x.size(-1)}));
    return {grad_x, grad_w};
  }
};

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  // The bias is added outside: the addition saves nothing of it.
  auto y = Linear::apply(x, weight);
  return bias.defined() ? y + bias : y;
}

bool fused_attention_on_cuda() {
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  static const bool enabled = [] {
    const char* forced = std::getenv("PSTAR_ATTENTION");
    return forced == nullptr || std::strcmp(forced, "explicit") != 0;
  }();
  return enabled;
#else
  return false;
#endif
}

std::optional<at::Tensor> fused_causal_attention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, const at::Tensor& allowed,
                                                 std::optional<double> scale) {
  if (!q.is_cuda() || !fused_attention_on_cuda()) return std::nullopt;
  // The kernels' own scale is 1/sqrt(head_dim); another (Gemma 3's query_pre_attn_scalar) is an
  // argument from LibTorch 2.1 on.
  const double own = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const bool own_scale = !scale || *scale == own;
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 1)
  const std::optional<double> given = own_scale ? std::nullopt : scale;
  // With a mask the flash kernel is out; the memory-efficient one takes a boolean mask.
  if (allowed.defined())
    return at::scaled_dot_product_attention(q, k, v, allowed, /*dropout_p=*/0.0,
                                            /*is_causal=*/false, given);
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true, given);
#elif PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  if (!own_scale) return std::nullopt;
  if (allowed.defined())
    return at::scaled_dot_product_attention(q, k, v, allowed, /*dropout_p=*/0.0,
                                            /*is_causal=*/false);
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true);
#else
  (void)k;
  (void)v;
  (void)allowed;
  (void)own_scale;
  return std::nullopt;
#endif
}

at::Tensor sliding_window_mask(const at::Tensor& allowed, int64_t seq, int64_t window,
                               c10::Device device) {
  if (window >= seq) return allowed;
  const auto i = torch::arange(seq, torch::dtype(torch::kInt64).device(device));
  const auto distance = i.unsqueeze(1) - i.unsqueeze(0);  // query minus key
  const auto band = distance.ge(0).logical_and(distance.lt(window)).view({1, 1, seq, seq});
  return allowed.defined() ? allowed.logical_and(band) : band;
}

at::Tensor segment_causal_mask(const at::Tensor& segments) {
  const int64_t seq = segments.size(1);
  const auto same = segments.unsqueeze(2).eq(segments.unsqueeze(1));  // [B, S, S]
  const auto causal =
      torch::ones({seq, seq}, torch::dtype(torch::kBool).device(segments.device())).tril();
  return same.logical_and(causal).unsqueeze(1);
}

at::Tensor mask_scores(const at::Tensor& scores, const at::Tensor& allowed) {
  const auto minus_inf = -std::numeric_limits<float>::infinity();
  if (allowed.defined()) return scores.masked_fill(allowed.logical_not(), minus_inf);
  const int64_t seq = scores.size(-1);
  const auto future =
      torch::ones({seq, seq}, torch::dtype(torch::kBool).device(scores.device())).triu(1);
  return scores.masked_fill(future, minus_inf);
}

}  // namespace pstar::model
