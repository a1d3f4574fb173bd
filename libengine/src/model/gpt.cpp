#include "pstar/model/gpt.h"

#include <cmath>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/factory.h"  // initialise_unit
#include "pstar/model/hooks.h"
#include "pstar/model/ops.h"

#include <torch/autograd.h>

namespace pstar::model {

Conv1D::Conv1D(int64_t in_features, int64_t out_features) {
  // Values come from the builder (Note [counter-based init]).
  weight = register_parameter("weight", torch::empty({in_features, out_features}));
  bias = register_parameter("bias", torch::empty({out_features}));
}

torch::Tensor Conv1D::forward(const torch::Tensor& x) {
  return run_module(*this, [&] {
    auto sizes = x.sizes().vec();
    sizes.back() = weight.size(1);
    return torch::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(sizes);
  });
}

GptLayerNorm::GptLayerNorm(int64_t hidden, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::empty({hidden}));
  bias = register_parameter("bias", torch::empty({hidden}));
}

torch::Tensor GptLayerNorm::forward(const torch::Tensor& x) {
  return run_module(*this, [&] {
    const auto f32 = torch::kFloat32;
    return torch::layer_norm(x.to(f32), {weight.size(0)}, weight.to(f32), bias.to(f32), eps)
        .to(x.scalar_type());
  });
}

GptEmbedding::GptEmbedding(int64_t count, int64_t dim, int64_t padding_idx_)
    : padding_idx(padding_idx_) {
  weight = register_parameter("weight", torch::empty({count, dim}));
}

torch::Tensor GptEmbedding::forward(const torch::Tensor& ids) {
  // With engine.use_cpu_embedding the table stays on the host while the rest computes on a GPU:
  // the lookup runs where the table is (no-ops when both are on one device).
  return run_module(*this, [&] {
    return torch::embedding(weight, ids.to(weight.device()), padding_idx).to(ids.device());
  });
}

GptAttention::GptAttention(const GptConfig& config) : heads(config.heads) {
  c_attn = register_module("c_attn", std::make_shared<Conv1D>(config.hidden, 3 * config.hidden));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(config.hidden, config.hidden));
}

torch::Tensor GptAttention::forward(const torch::Tensor& x, const torch::Tensor& allowed) {
  const int64_t batch = x.size(0), seq = x.size(1), hidden = x.size(2);
  const int64_t head_dim = hidden / heads;
  auto qkv = c_attn->forward(x).split(hidden, /*dim=*/2);
  auto heads_view = [&](const torch::Tensor& t) {
    return t.view({batch, seq, heads, head_dim}).transpose(1, 2);  // [B, nh, S, hd]
  };
  auto q = heads_view(qkv[0]), k = heads_view(qkv[1]), v = heads_view(qkv[2]);
  // Note [fused attention]
  if (auto fused = fused_causal_attention(q, k, v, allowed))
    return c_proj->forward(fused->transpose(1, 2).reshape({batch, seq, hidden}));
  auto scores = torch::matmul(q, k.transpose(-2, -1)).to(torch::kFloat32) *
                (1.0 / std::sqrt(static_cast<double>(head_dim)));
  // Softmax in fp32 whatever the compute dtype, for bf16/fp16 stability.
  auto probs = mask_scores(scores, allowed).softmax(-1).to(x.scalar_type());
  auto y = torch::matmul(probs, v).transpose(1, 2).reshape({batch, seq, hidden});
  return c_proj->forward(y);
}

GptMlp::GptMlp(const GptConfig& config) {
  c_fc = register_module("c_fc", std::make_shared<Conv1D>(config.hidden, 4 * config.hidden));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(4 * config.hidden, config.hidden));
}

torch::Tensor GptMlp::forward(const torch::Tensor& x) {
  return c_proj->forward(torch::gelu(c_fc->forward(x), "tanh"));
}

GptBlock::GptBlock(const GptConfig& config) {
  ln_1 =
      register_module("ln_1", std::make_shared<GptLayerNorm>(config.hidden, config.layer_norm_eps));
  attn = register_module("attn", std::make_shared<GptAttention>(config));
  ln_2 =
      register_module("ln_2", std::make_shared<GptLayerNorm>(config.hidden, config.layer_norm_eps));
  mlp = register_module("mlp", std::make_shared<GptMlp>(config));
}

torch::Tensor GptBlock::forward(const torch::Tensor& x, const torch::Tensor& allowed) {
  auto h = x + attn->forward(ln_1->forward(x), allowed);
  return h + mlp->forward(ln_2->forward(h));
}

// Each unit is built and handed over (or given its values, Note [counter-based init]) before the
// next is built; its values depend on its parameters' names alone, not on the order.
GptTransformer::GptTransformer(const GptConfig& config, const BuildOptions& options) {
  torch::NoGradGuard no_grad;
  ModelShape shape;
  shape.family = ModelFamily::kGpt;
  shape.gpt = config;
  auto built = [&](torch::nn::Module& unit, const std::string& prefix) {
    if (options.on_unit_built)
      options.on_unit_built(unit, prefix);
    else if (options.initialise)
      initialise_unit(unit, prefix, shape, options.seed);
  };
  wte = register_module("wte", std::make_shared<GptEmbedding>(config.vocab_size, config.hidden));
  built(*wte, "transformer.wte.");
  wpe = register_module("wpe", std::make_shared<GptEmbedding>(config.seq_len, config.hidden));
  built(*wpe, "transformer.wpe.");
  auto blocks = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.layers; ++i) {
    auto block = std::make_shared<GptBlock>(config);
    h.push_back(block);
    blocks->push_back(block);
    built(*block, "transformer.h." + std::to_string(i) + ".");
  }
  ln_f =
      register_module("ln_f", std::make_shared<GptLayerNorm>(config.hidden, config.layer_norm_eps));
  built(*ln_f, "transformer.ln_f.");
}

Gpt::Gpt(const GptConfig& config, const BuildOptions& options) : config_(config) {
  transformer_ = register_module("transformer", std::make_shared<GptTransformer>(config, options));
  for (auto& block : transformer_->h) {
    block_fns_.emplace_back([this, block](const torch::Tensor& x) -> std::vector<torch::Tensor> {
      return {block->forward(x, allowed_)};
    });
  }
}

torch::Tensor Gpt::hidden(const torch::Tensor& input_ids, const torch::Tensor& positions) {
  PSTAR_CHECK(input_ids.dim() == 2, ConfigError, "GPT input must be [batch, seq] token ids, got ",
              input_ids.sizes());
  const int64_t seq = input_ids.size(1);
  PSTAR_CHECK(seq <= config_.seq_len, ConfigError, "sequence of ", seq,
              " tokens is longer than model.seq_len ", config_.seq_len);
  auto& t = *transformer_;
  torch::Tensor x;
  if (positions.defined()) {
    x = t.wte->forward(input_ids) + t.wpe->forward(positions);  // [B, S, hidden] rows per token
  } else {
    const auto arange = torch::arange(seq, torch::dtype(torch::kLong).device(input_ids.device()));
    x = t.wte->forward(input_ids) + t.wpe->forward(arange).unsqueeze(0);
  }
  for (size_t i = 0; i < t.h.size(); ++i)
    x = checkpointing_ ? checkpoint(&block_fns_[i], x)[0] : t.h[i]->forward(x, allowed_);
  return t.ln_f->forward(x);
}

torch::Tensor Gpt::head(const torch::Tensor& x) {
  auto& t = *transformer_;
  // LM head tied to the token embedding: a second use of wte, with its own hooks.
  return run_module(*t.wte, [&] { return pstar::model::linear(x, t.wte->weight.to(x.device())); });
}

torch::Tensor Gpt::forward(const torch::Tensor& input_ids) {
  allowed_ = torch::Tensor();
  return head(hidden(input_ids, torch::Tensor()));
}

torch::Tensor Gpt::forward_records(const torch::Tensor& input_ids, const RecordInputs& records) {
  allowed_ = segment_causal_mask(records.segments);  // Note [packed attention]
  const torch::Tensor x = hidden(input_ids, records.positions);
  // Only the positions whose targets count reach the head (the vocabulary-wide product is most of
  // a small model's work there).
  return head(x.reshape({-1, x.size(-1)}).index_select(0, records.rows));
}

}  // namespace pstar::model
