#include "pstar/model/llama.h"

#include <cmath>
#include <limits>

#include "pstar/base/error.h"
#include "pstar/model/factory.h"  // initialise_unit
#include "pstar/model/hooks.h"
#include "pstar/model/ops.h"

#include <torch/autograd.h>

namespace pstar::model {

LlamaLinear::LlamaLinear(int64_t in_features, int64_t out_features, bool with_bias) {
  // Values come from the builder (Note [counter-based init]).
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}));
}

torch::Tensor LlamaLinear::forward(const torch::Tensor& x) {
  return run_module(*this, [&] { return pstar::model::linear(x, weight, bias); });
}

RmsNorm::RmsNorm(int64_t hidden, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::empty({hidden}));
}

torch::Tensor RmsNorm::forward(const torch::Tensor& x) {
  return run_module(*this, [&] {
    const auto x32 = x.to(torch::kFloat32);
    const auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * normed.to(x.scalar_type());
  });
}

// Note [llama3 rope]
// Llama 3.1 stretches the rotary embedding to long contexts by frequency band: wavelengths longer
// than original_max_position_embeddings / low_freq_factor are divided by `factor` (their angles
// slow down), wavelengths shorter than original / high_freq_factor are kept, and between the two
// the inverse frequency is interpolated linearly in original / wavelength. Computed in fp32 with
// Hugging Face's operations, so the tables equal theirs.
torch::Tensor rope_inverse_frequencies(const LlamaConfig& c) {
  const auto exponents =
      torch::arange(0, c.head_dim, 2, torch::kInt64).to(torch::kFloat32) / c.head_dim;
  auto inv_freq = 1.0 / torch::pow(torch::scalar_tensor(c.rope_theta, torch::kFloat32), exponents);
  if (!c.rope_scaling) return inv_freq;
  const RopeScaling& s = *c.rope_scaling;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  const auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const auto smooth =
      (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

RotaryTables rotary_tables(const LlamaConfig& c, int64_t seq) {
  const auto positions = torch::arange(seq, torch::kInt64).to(torch::kFloat32);
  const auto freqs = torch::outer(positions, rope_inverse_frequencies(c));  // [seq, head_dim/2]
  const auto angles = torch::cat({freqs, freqs}, -1);
  return {angles.cos(), angles.sin()};
}

namespace {

// Hugging Face's rotate_half: (x1, x2) → (−x2, x1) over the two halves of the last dimension.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

torch::Tensor apply_rope(const torch::Tensor& x, const RotaryTables& rope) {
  return x * rope.cos + rotate_half(x) * rope.sin;  // tables [seq, head_dim] broadcast
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c)
    : heads(c.heads), kv_heads(c.kv_heads), head_dim(c.head_dim) {
  q_proj =
      register_module("q_proj", std::make_shared<LlamaLinear>(c.hidden, c.q_width(), c.qkv_bias));
  k_proj =
      register_module("k_proj", std::make_shared<LlamaLinear>(c.hidden, c.kv_width(), c.qkv_bias));
  v_proj =
      register_module("v_proj", std::make_shared<LlamaLinear>(c.hidden, c.kv_width(), c.qkv_bias));
  o_proj =
      register_module("o_proj", std::make_shared<LlamaLinear>(c.q_width(), c.hidden, c.o_bias));
}

torch::Tensor LlamaAttention::forward(const torch::Tensor& x, const RotaryTables& rope,
                                      const torch::Tensor& allowed) {
  const int64_t batch = x.size(0), seq = x.size(1);
  auto split_heads = [&](const torch::Tensor& t, int64_t n) {
    return t.view({batch, seq, n, head_dim}).transpose(1, 2);  // [B, n, S, hd]
  };
  auto q = apply_rope(split_heads(q_proj->forward(x), heads), rope);
  auto k = apply_rope(split_heads(k_proj->forward(x), kv_heads), rope);
  auto v = split_heads(v_proj->forward(x), kv_heads);
  // Grouped-query attention: each key/value head serves heads / kv_heads query heads in a row.
  if (kv_heads != heads) {
    const int64_t group = heads / kv_heads;
    k = k.unsqueeze(2)
            .expand({batch, kv_heads, group, seq, head_dim})
            .reshape({batch, heads, seq, head_dim});
    v = v.unsqueeze(2)
            .expand({batch, kv_heads, group, seq, head_dim})
            .reshape({batch, heads, seq, head_dim});
  }
  // Note [fused attention] (Hugging Face's "sdpa" implementation, its default on GPUs).
  if (auto fused = fused_causal_attention(q, k, v, allowed))
    return o_proj->forward(fused->transpose(1, 2).reshape({batch, seq, heads * head_dim}));
  // As Hugging Face's eager attention: scores in the compute dtype, softmax in fp32.
  const auto scores =
      torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  const auto probs =
      mask_scores(scores.to(torch::kFloat32), allowed).softmax(-1).to(x.scalar_type());
  const auto y = torch::matmul(probs, v).transpose(1, 2).reshape({batch, seq, heads * head_dim});
  return o_proj->forward(y);
}

LlamaMlp::LlamaMlp(const LlamaConfig& c) {
  gate_proj = register_module("gate_proj",
                              std::make_shared<LlamaLinear>(c.hidden, c.intermediate, c.mlp_bias));
  up_proj = register_module("up_proj",
                            std::make_shared<LlamaLinear>(c.hidden, c.intermediate, c.mlp_bias));
  down_proj = register_module("down_proj",
                              std::make_shared<LlamaLinear>(c.intermediate, c.hidden, c.mlp_bias));
}

torch::Tensor LlamaMlp::forward(const torch::Tensor& x) {
  return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c) {
  input_layernorm =
      register_module("input_layernorm", std::make_shared<RmsNorm>(c.hidden, c.rms_norm_eps));
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c));
  post_attention_layernorm = register_module("post_attention_layernorm",
                                             std::make_shared<RmsNorm>(c.hidden, c.rms_norm_eps));
  mlp = register_module("mlp", std::make_shared<LlamaMlp>(c));
}

torch::Tensor LlamaDecoderLayer::forward(const torch::Tensor& x, const RotaryTables& rope,
                                         const torch::Tensor& allowed) {
  auto h = x + self_attn->forward(input_layernorm->forward(x), rope, allowed);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

namespace {

// A unit goes to options.on_unit_built, or is given its values here (Note [counter-based init]).
void unit_built(const LlamaConfig& c, const BuildOptions& options, torch::nn::Module& unit,
                const std::string& prefix) {
  if (options.on_unit_built) {
    options.on_unit_built(unit, prefix);
  } else if (options.initialise) {
    ModelShape shape;
    shape.family = ModelFamily::kLlama;
    shape.llama = c;
    initialise_unit(unit, prefix, shape, options.seed);
  }
}

}  // namespace

// As GptTransformer: each unit is built and handed over before the next is built; its values
// depend on its parameters' names alone.
LlamaModel::LlamaModel(const LlamaConfig& c, const BuildOptions& options) {
  torch::NoGradGuard no_grad;
  auto built = [&](torch::nn::Module& unit, const std::string& prefix) {
    unit_built(c, options, unit, prefix);
  };
  embed_tokens =
      register_module("embed_tokens", std::make_shared<GptEmbedding>(c.vocab_size, c.hidden));
  built(*embed_tokens, "model.embed_tokens.");
  auto list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto layer = std::make_shared<LlamaDecoderLayer>(c);
    layers.push_back(layer);
    list->push_back(layer);
    built(*layer, "model.layers." + std::to_string(i) + ".");
  }
  norm = register_module("norm", std::make_shared<RmsNorm>(c.hidden, c.rms_norm_eps));
  built(*norm, "model.norm.");
}

Llama::Llama(const LlamaConfig& config, const BuildOptions& options) : config_(config) {
  validate_llama_config(config_, "model");
  model_ = register_module("model", std::make_shared<LlamaModel>(config_, options));
  if (!config_.tie_word_embeddings) {
    torch::NoGradGuard no_grad;
    lm_head_ = register_module(
        "lm_head", std::make_shared<LlamaLinear>(config_.hidden, config_.vocab_size, false));
    unit_built(config_, options, *lm_head_, "lm_head.");
  }
  rope_fp32_ = rotary_tables(config_, config_.seq_len);
  for (auto& layer : model_->layers)
    layer_fns_.emplace_back(
        [this, layer](const torch::Tensor& x) { return layer->forward(x, rope_, allowed_); });
}

torch::Tensor Llama::hidden(const torch::Tensor& input_ids, const torch::Tensor& positions) {
  PSTAR_CHECK(input_ids.dim() == 2, ConfigError, "Llama input must be [batch, seq] token ids, got ",
              input_ids.sizes());
  const int64_t batch = input_ids.size(0), seq = input_ids.size(1);
  PSTAR_CHECK(seq <= config_.seq_len, ConfigError, "sequence of ", seq,
              " tokens is longer than model.seq_len ", config_.seq_len);
  auto& m = *model_;
  auto x = m.embed_tokens->forward(input_ids);
  // Hugging Face casts the fp32 tables to the activations' dtype before rotating.
  const auto options = torch::dtype(x.scalar_type()).device(x.device());
  if (positions.defined()) {
    // Each token's own angles: rows of the tables by position, [batch, 1, seq, head_dim].
    const auto flat = positions.reshape({-1});
    auto rows = [&](const torch::Tensor& table) {
      return table.to(x.device())
          .index_select(0, flat)
          .view({batch, seq, -1})
          .unsqueeze(1)
          .to(options);
    };
    rope_ = {rows(rope_fp32_.cos), rows(rope_fp32_.sin)};
  } else {
    rope_ = {rope_fp32_.cos.narrow(0, 0, seq).to(options),
             rope_fp32_.sin.narrow(0, 0, seq).to(options)};
  }
  for (size_t i = 0; i < m.layers.size(); ++i)
    x = checkpointing_ ? checkpoint(&layer_fns_[i], x) : m.layers[i]->forward(x, rope_, allowed_);
  return m.norm->forward(x);
}

torch::Tensor Llama::head(const torch::Tensor& x) {
  if (lm_head_) return lm_head_->forward(x);
  // Tied head: a second use of embed_tokens, with its own hooks.
  auto& m = *model_;
  return run_module(*m.embed_tokens,
                    [&] { return pstar::model::linear(x, m.embed_tokens->weight.to(x.device())); });
}

torch::Tensor Llama::forward(const torch::Tensor& input_ids) {
  allowed_ = torch::Tensor();
  return head(hidden(input_ids, torch::Tensor()));
}

torch::Tensor Llama::forward_records(const torch::Tensor& input_ids, const RecordInputs& records) {
  allowed_ = segment_causal_mask(records.segments);  // Note [packed attention]
  const torch::Tensor x = hidden(input_ids, records.positions);
  return head(x.reshape({-1, x.size(-1)}).index_select(0, records.rows));
}

}  // namespace pstar::model
