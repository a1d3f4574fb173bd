// Operations that are safe on parameters the chunk engine moves.
//
// Note [saved parameter views]
// The chunk engine may move a parameter's memory between its module's forward and backward, and
// re-points the parameter tensor itself. Autograd follows that when it saved the parameter, but not
// when it saved a view of it: torch::nn::Linear computes x @ weight.t() and saves the transposed
// view, which would still point at the old memory. Modules trained with the chunk engine compute
// with the parameter tensors directly (matmul(x, weight) with weight [in, out], addmm, embedding,
// layer_norm), or use these functions, which save the parameters themselves.
#pragma once

#include <ATen/core/Tensor.h>

namespace pstar::model {

// y = x @ weightᵀ + bias, with torch::nn::Linear's layout (weight [out, in]); bias may be
// undefined. Saves x and weight (not a view of it) for backward.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

}  // namespace pstar::model
