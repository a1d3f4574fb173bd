#include "pstar/model/ops.h"

#include <torch/autograd.h>
#include <torch/torch.h>

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

}  // namespace pstar::model
