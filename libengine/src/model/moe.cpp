#include "pstar/model/moe.h"

#include <torch/torch.h>

#include "pstar/model/decoder.h"
#include "pstar/model/family.h"

namespace pstar::model {

DecoderExpert::DecoderExpert(const DecoderConfig& c) : activation(c.activation) {
  const MoeSpelling& names = *c.family->moe;
  const int64_t h = c.hidden, inter = c.moe->expert_intermediate;
  gate = register_module(names.gate, std::make_shared<DecoderLinear>(h, inter, false));
  up = register_module(names.up, std::make_shared<DecoderLinear>(h, inter, false));
  down = register_module(names.down, std::make_shared<DecoderLinear>(inter, h, false));
}

torch::Tensor DecoderExpert::forward(const torch::Tensor& x) {
  const torch::Tensor g = gate->forward(x);
  const torch::Tensor act =
      activation == MlpActivation::kSilu ? torch::silu(g) : torch::gelu(g, "tanh");
  return down->forward(act * up->forward(x));
}

DecoderMoe::DecoderMoe(const DecoderConfig& c, RoutingRecord* record)
    : moe_(*c.moe), record_(record) {
  gate = register_module("gate", std::make_shared<DecoderLinear>(c.hidden, moe_.experts, false));
  auto list = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < moe_.experts; ++e) {
    experts.push_back(std::make_shared<DecoderExpert>(c));
    list->push_back(experts.back());
  }
}

// Note [moe block]
// As Hugging Face's MixtralSparseMoeBlock and Qwen3MoeSparseMoeBlock compute it: router logits in
// the activations' dtype, their softmax in fp32, each token's top_k experts and their
// probabilities, renormalised to sum to 1 (always for Mixtral; with norm_topk_prob for
// Qwen3-MoE), cast to the activations' dtype; each expert's gated MLP over the tokens that chose
// it, times their weights, added into the output token by token, experts in index order. No token
// is dropped.
//
// Every expert runs every forward, those that received no token on an empty batch: the engine's
// hooks fire for each expert in the same order whatever the routing, so every iteration's moments
// are the warm-up's (Note [fixed trace] in engine/placement.h) and every rank issues the same
// collectives; an idle expert's gradient is the zero its empty product gives. (With E experts and
// top-k routing an expert is idle among T tokens with probability about (1 - k/E)^T: rarely at
// training batch sizes, so running all costs nothing worth a data-dependent schedule.)
torch::Tensor DecoderMoe::forward(const torch::Tensor& x) {
  const int64_t hidden = x.size(-1);
  const torch::Tensor flat = x.reshape({-1, hidden});
  const int64_t tokens = flat.size(0);
  const torch::Tensor logits = gate->forward(flat);  // [T, E]
  const torch::Tensor probs = logits.to(torch::kFloat32).softmax(-1);
  auto [weights, chosen] = probs.topk(moe_.top_k, -1);  // [T, k] each
  if (moe_.normalize_top_k) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type());
  // Each expert's tokens: the (token, slot) pairs sorted by expert, stably, so that an expert's
  // rows keep the tokens' order.
  const torch::Tensor flat_chosen = chosen.reshape({-1});
  const torch::Tensor order = std::get<1>(flat_chosen.sort(/*stable=*/true, 0, false));
  const torch::Tensor counts = torch::bincount(flat_chosen, {}, moe_.experts);
  const torch::Tensor host_counts = counts.to(torch::kCPU).contiguous();
  const int64_t* per_expert = host_counts.data_ptr<int64_t>();
  const torch::Tensor token_of = order.div(moe_.top_k, "floor");
  const torch::Tensor flat_weights = weights.reshape({-1}).index_select(0, order);
  torch::Tensor out = torch::zeros_like(flat);
  int64_t begin = 0;
  for (int64_t e = 0; e < moe_.experts; ++e) {
    const int64_t n = per_expert[e];
    const torch::Tensor rows = token_of.narrow(0, begin, n);
    const torch::Tensor y = experts[static_cast<size_t>(e)]->forward(flat.index_select(0, rows)) *
                            flat_weights.narrow(0, begin, n).unsqueeze(-1);
    out.index_add_(0, rows, y);
    begin += n;
  }
  if (record_ != nullptr) {
    record_->tokens.push_back(host_counts);  // already on the host for the loop above
    record_->tokens_per_layer = tokens;
    // Note [router aux loss]: the sum over tokens of each expert's probability.
    record_->probability_sums.push_back(record_->with_grad ? probs.sum(0) : probs.detach().sum(0));
  }
  return out.view(x.sizes());
}

}  // namespace pstar::model
