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

#include <optional>

#include <ATen/core/Tensor.h>

namespace pstar::model {

// y = x @ weightᵀ + bias, with torch::nn::Linear's layout (weight [out, in]); bias may be
// undefined. Saves x and weight (not a view of it) for backward.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// Note [fused attention]
// Causal attention softmax(scale · q kᵀ + mask) v for q, k, v of shape [batch, heads, seq,
// head_dim] (scale 1/√head_dim unless given), through LibTorch's scaled_dot_product_attention where
// it can: LibTorch 2.0 or later and q on a CUDA device. Its flash and memory-efficient kernels
// never write the [seq, seq] scores to memory and take the softmax in fp32 inside; the models'
// explicit path writes the scores in fp32, masks them, takes the softmax and casts back, several
// passes over batch × heads × seq² floats per layer and their saved copies for the backward.
// Returns std::nullopt where the fused path is not available (Debian's LibTorch 1.13, the CPU), and
// the model computes it explicitly. PSTAR_ATTENTION=explicit in the environment (read once) forces
// the explicit path everywhere. `allowed` (optional): a [batch, 1, seq, seq] bool mask, true where
// query i may see key j (segment_causal_mask, sliding_window_mask), in place of the plain causal
// mask. A `scale` other than 1/√head_dim needs LibTorch 2.1's `scale` argument: with an older one,
// std::nullopt.
std::optional<at::Tensor> fused_causal_attention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v,
                                                 const at::Tensor& allowed = {},
                                                 std::optional<double> scale = std::nullopt);

// Note [packed attention]
// Records packed into one row (Note [packed batches] in pstar/data/batches.h) must not see each
// other: position i attends to j only when j <= i and segments[b, i] == segments[b, j]. This is
// that mask, [batch, 1, seq, seq] bool (true: may attend), from segments [batch, seq] on their
// device: batch·seq² bytes, 16 MiB for 4 rows of 2048, kept for the layers' recomputation. Each
// row of it has its diagonal set, so no softmax runs over nothing.
at::Tensor segment_causal_mask(const at::Tensor& segments);

// Note [sliding window]
// A sliding-window layer lets query i see key j when i - window < j <= i: the last `window`
// positions, its own included, as Hugging Face's sliding_window_overlay and flash attention's
// window_size (window - 1, ...) count them. This is that mask, [1, 1, seq, seq] bool, and-ed with
// `allowed` (Note [packed attention]'s mask) when that is defined; with window >= seq it is
// `allowed` itself (undefined: plain causal), so the fused kernels keep their causal path.
at::Tensor sliding_window_mask(const at::Tensor& allowed, int64_t seq, int64_t window,
                               c10::Device device);

// Scores [batch, heads, seq, seq] with the positions a query may not see set to -inf: the causal
// mask, or `allowed`'s complement when it is defined. For the models' explicit attention.
at::Tensor mask_scores(const at::Tensor& scores, const at::Tensor& allowed);
// Whether fused_causal_attention computes for tensors on a CUDA device in this build and process.
bool fused_attention_on_cuda();

}  // namespace pstar::model
