#include "pstar/model/decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pstar/base/error.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/factory.h"  // initialise_unit
#include "pstar/model/family.h"
#include "pstar/model/hooks.h"
#include "pstar/model/kv_cache.h"
#include "pstar/model/ops.h"

#include <torch/autograd.h>

namespace pstar::model {

DecoderLinear::DecoderLinear(int64_t in_features, int64_t out_features, bool with_bias) {
  // Values come from the builder (Note [counter-based init]).
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}));
}

torch::Tensor DecoderLinear::forward(const torch::Tensor& x) {
  return run_module(*this, [&] { return pstar::model::linear(x, weight, bias); });
}

RmsNorm::RmsNorm(int64_t hidden, double eps_, NormKind kind_) : eps(eps_), kind(kind_) {
  weight = register_parameter("weight", torch::empty({hidden}));
}

torch::Tensor RmsNorm::forward(const torch::Tensor& x) {
  return run_module(*this, [&] {
    const auto x32 = x.to(torch::kFloat32);
    const auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
    switch (kind) {
      case NormKind::kWeight:
        return weight * normed.to(x.scalar_type());
      case NormKind::kOnePlusWeight:
        return (normed * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
    }
    PSTAR_INTERNAL_ASSERT(false, "unknown norm kind");
    return torch::Tensor();
  });
}

// Note [llama3 rope]
// Llama 3.1 stretches the rotary embedding to long contexts by frequency band: wavelengths longer
// than original_max_position_embeddings / low_freq_factor are divided by `factor` (their angles
// slow down), wavelengths shorter than original / high_freq_factor are kept, and between the two
// the inverse frequency is interpolated linearly in original / wavelength. "linear" (Gemma 3's
// global layers) divides every inverse frequency by `factor`. Computed in fp32 with Hugging Face's
// operations, so the tables equal theirs.
torch::Tensor rope_inverse_frequencies(const RopeConfig& r, int64_t head_dim) {
  const auto exponents =
      torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat32) / head_dim;
  auto inv_freq = 1.0 / torch::pow(torch::scalar_tensor(r.theta, torch::kFloat32), exponents);
  switch (r.type) {
    case RopeType::kDefault:
      return inv_freq;
    case RopeType::kLinear:
      return inv_freq / r.factor;
    case RopeType::kLlama3:
      break;
  }
  const double old_context = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / r.low_freq_factor;
  const double high_freq_wavelen = old_context / r.high_freq_factor;
  const auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  const auto smooth =
      (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const auto smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  const auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

RotaryTables rotary_tables(const RopeConfig& rope, int64_t head_dim, int64_t seq) {
  const auto positions = torch::arange(seq, torch::kInt64).to(torch::kFloat32);
  const auto freqs = torch::outer(positions, rope_inverse_frequencies(rope, head_dim));
  const auto angles = torch::cat({freqs, freqs}, -1);  // [seq, head_dim]
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

std::shared_ptr<RmsNorm> make_norm(const DecoderConfig& c, int64_t width) {
  return std::make_shared<RmsNorm>(width, c.norms.eps, c.norms.kind);
}

}  // namespace

DecoderAttention::DecoderAttention(const DecoderConfig& c)
    : heads(c.heads), kv_heads(c.kv_heads), head_dim(c.head_dim), scale(c.query_scale()) {
  // Construction order is use order (the chunk layout follows it): the projections, the q/k norms
  // that follow them, o_proj.
  q_proj =
      register_module("q_proj", std::make_shared<DecoderLinear>(c.hidden, c.q_width(), c.bias.qkv));
  k_proj = register_module("k_proj",
                           std::make_shared<DecoderLinear>(c.hidden, c.kv_width(), c.bias.qkv));
  v_proj = register_module("v_proj",
                           std::make_shared<DecoderLinear>(c.hidden, c.kv_width(), c.bias.qkv));
  if (c.norms.qk) {
    q_norm = register_module("q_norm", make_norm(c, c.head_dim));
    k_norm = register_module("k_norm", make_norm(c, c.head_dim));
  }
  o_proj =
      register_module("o_proj", std::make_shared<DecoderLinear>(c.q_width(), c.hidden, c.bias.o));
}

torch::Tensor DecoderAttention::forward(const torch::Tensor& x, const RotaryTables& rope,
                                        const torch::Tensor& allowed) {
  const int64_t batch = x.size(0), seq = x.size(1);
  auto split_heads = [&](const torch::Tensor& t, int64_t n) {
    return t.view({batch, seq, n, head_dim}).transpose(1, 2);  // [B, n, S, hd]
  };
  auto q = split_heads(q_proj->forward(x), heads);
  auto k = split_heads(k_proj->forward(x), kv_heads);
  auto v = split_heads(v_proj->forward(x), kv_heads);
  // Qwen3 and Gemma 3 normalise each head's query and key over head_dim before rotating them.
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = apply_rope(q, rope);
  k = apply_rope(k, rope);
  // Generating: earlier slots' keys and values are kept (Note [kv cache] in kv_cache.h).
  if (kv_cache != nullptr)
    return o_proj->forward(cached_attention(q, k, v, *kv_cache, allowed, scale));
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
  if (auto fused = fused_causal_attention(q, k, v, allowed, scale))
    return o_proj->forward(fused->transpose(1, 2).reshape({batch, seq, heads * head_dim}));
  // As Hugging Face's eager attention: scores in the compute dtype, softmax in fp32.
  const auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
  const auto probs =
      mask_scores(scores.to(torch::kFloat32), allowed).softmax(-1).to(x.scalar_type());
  const auto y = torch::matmul(probs, v).transpose(1, 2).reshape({batch, seq, heads * head_dim});
  return o_proj->forward(y);
}

DecoderMlp::DecoderMlp(const DecoderConfig& c) : activation(c.activation) {
  gate_proj = register_module(
      "gate_proj", std::make_shared<DecoderLinear>(c.hidden, c.intermediate, c.bias.mlp));
  up_proj = register_module("up_proj",
                            std::make_shared<DecoderLinear>(c.hidden, c.intermediate, c.bias.mlp));
  down_proj = register_module(
      "down_proj", std::make_shared<DecoderLinear>(c.intermediate, c.hidden, c.bias.mlp));
}

torch::Tensor DecoderMlp::forward(const torch::Tensor& x) {
  const torch::Tensor gate = gate_proj->forward(x);
  torch::Tensor act;
  switch (activation) {
    case MlpActivation::kSilu:
      act = torch::silu(gate);
      break;
    case MlpActivation::kGeluTanh:
      act = torch::gelu(gate, "tanh");
      break;
  }
  return down_proj->forward(act * up_proj->forward(x));
}

DecoderLayer::DecoderLayer(const DecoderConfig& c, LayerKind kind_, bool sparse,
                           RoutingRecord* routing)
    : kind(kind_) {
  input_layernorm = register_module("input_layernorm", make_norm(c, c.hidden));
  self_attn = register_module("self_attn", std::make_shared<DecoderAttention>(c));
  post_attention_layernorm = register_module("post_attention_layernorm", make_norm(c, c.hidden));
  if (c.norms.sandwich)
    pre_feedforward_layernorm =
        register_module("pre_feedforward_layernorm", make_norm(c, c.hidden));
  if (sparse) {
    moe = register_module(c.family->moe->block, std::make_shared<DecoderMoe>(c, routing));
  } else {
    mlp = register_module("mlp", std::make_shared<DecoderMlp>(c));
  }
  if (c.norms.sandwich)
    post_feedforward_layernorm =
        register_module("post_feedforward_layernorm", make_norm(c, c.hidden));
}

torch::Tensor DecoderLayer::forward(const torch::Tensor& x, const RotaryTables& rope,
                                    const torch::Tensor& allowed) {
  if (!pre_feedforward_layernorm) {
    auto h = x + self_attn->forward(input_layernorm->forward(x), rope, allowed);
    return h + feed_forward(post_attention_layernorm->forward(h));
  }
  // Gemma 3: each sublayer's output is normalised again before the residual add.
  auto h = x + post_attention_layernorm->forward(
                   self_attn->forward(input_layernorm->forward(x), rope, allowed));
  return h +
         post_feedforward_layernorm->forward(feed_forward(pre_feedforward_layernorm->forward(h)));
}

torch::Tensor DecoderLayer::feed_forward(const torch::Tensor& x) {
  return moe ? moe->forward(x) : mlp->forward(x);
}

namespace {

// A unit goes to options.on_unit_built, or is given its values here (Note [counter-based init]).
void unit_built(const DecoderConfig& c, const BuildOptions& options, torch::nn::Module& unit,
                const std::string& prefix) {
  if (options.on_unit_built) {
    options.on_unit_built(unit, prefix);
  } else if (options.initialise) {
    ModelShape shape;
    shape.family = ModelFamily::kDecoder;
    shape.decoder = c;
    initialise_unit(unit, prefix, shape, options.seed);
  }
}

}  // namespace

// As GptTransformer: each unit is built and handed over before the next is built; its values
// depend on its parameters' names alone.
DecoderModel::DecoderModel(const DecoderConfig& c, const BuildOptions& options,
                           RoutingRecord* routing) {
  torch::NoGradGuard no_grad;
  auto built = [&](torch::nn::Module& unit, const std::string& prefix) {
    unit_built(c, options, unit, prefix);
  };
  embed_tokens = register_module(
      "embed_tokens",
      std::make_shared<GptEmbedding>(c.vocab_size, c.hidden, c.pad_token_id.value_or(-1)));
  built(*embed_tokens, "model.embed_tokens.");
  auto list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto layer = std::make_shared<DecoderLayer>(c, c.layer_kind(i), c.sparse_layer(i), routing);
    layers.push_back(layer);
    list->push_back(layer);
    built(*layer, "model.layers." + std::to_string(i) + ".");
  }
  norm = register_module("norm", make_norm(c, c.hidden));
  built(*norm, "model.norm.");
}

Decoder::Decoder(const DecoderConfig& config, const BuildOptions& options)
    : config_(config), routing_(config.moe && config.moe->aux_loss) {
  validate_decoder_config(config_, "model");
  model_ = register_module("model", std::make_shared<DecoderModel>(config_, options, &routing_));
  if (!config_.tie_word_embeddings) {
    torch::NoGradGuard no_grad;
    lm_head_ = register_module(
        "lm_head", std::make_shared<DecoderLinear>(config_.hidden, config_.vocab_size, false));
    unit_built(config_, options, *lm_head_, "lm_head.");
  }
  for (int k = 0; k < kLayerKinds; ++k)
    rope_fp32_[static_cast<size_t>(k)] = rotary_tables(
        config_.attention.rope[static_cast<size_t>(k)], config_.head_dim, config_.seq_len);
  for (auto& layer : model_->layers) {
    const auto kind = static_cast<size_t>(layer->kind);
    layer_fns_.emplace_back(
        [this, layer, kind](const torch::Tensor& x) -> std::vector<torch::Tensor> {
          const size_t recorded = routing_.probability_sums.size();
          std::vector<torch::Tensor> out{layer->forward(x, rope_[kind], allowed_[kind])};
          if (routing_.probability_sums.size() == recorded) return out;  // a dense layer
          // Note [checkpointed routing]
          if (routing_.with_grad) out.push_back(routing_.probability_sums.back());
          if (recomputing()) {
            routing_.tokens.pop_back();
            routing_.probability_sums.pop_back();
          }
          return out;
        });
  }
}

torch::Tensor Decoder::hidden(const torch::Tensor& input_ids, const torch::Tensor& positions,
                              const torch::Tensor& segments) {
  PSTAR_CHECK(input_ids.dim() == 2, ConfigError,
              "decoder input must be [batch, seq] token ids, got ", input_ids.sizes());
  const int64_t batch = input_ids.size(0), seq = input_ids.size(1);
  PSTAR_CHECK(seq <= config_.seq_len, ConfigError, "sequence of ", seq,
              " tokens is longer than model.seq_len ", config_.seq_len);
  auto& m = *model_;
  routing_.clear();
  auto x = embed(input_ids);
  // Hugging Face casts the fp32 tables to the activations' dtype before rotating.
  const auto options = torch::dtype(x.scalar_type()).device(x.device());
  const torch::Tensor packed =
      segments.defined() ? segment_causal_mask(segments) : torch::Tensor();  // Note [packed ...]
  for (size_t k = 0; k < static_cast<size_t>(kLayerKinds); ++k) {
    const RotaryTables& table = rope_fp32_[k];
    if (positions.defined()) {
      // Each token's own angles: rows of the tables by position, [batch, 1, seq, head_dim].
      const auto flat = positions.reshape({-1});
      auto rows = [&](const torch::Tensor& t) {
        return t.to(x.device())
            .index_select(0, flat)
            .view({batch, seq, -1})
            .unsqueeze(1)
            .to(options);
      };
      rope_[k] = {rows(table.cos), rows(table.sin)};
    } else {
      rope_[k] = {table.cos.narrow(0, 0, seq).to(options), table.sin.narrow(0, 0, seq).to(options)};
    }
    allowed_[k] =
        static_cast<LayerKind>(k) == LayerKind::kSliding && config_.attention.sliding_window
            ? sliding_window_mask(packed, seq, *config_.attention.sliding_window, x.device())
            : packed;
  }
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const auto kind = static_cast<size_t>(m.layers[i]->kind);
    if (!checkpointing_) {
      x = m.layers[i]->forward(x, rope_[kind], allowed_[kind]);
      continue;
    }
    std::vector<torch::Tensor> out = checkpoint(&layer_fns_[i], x);
    x = out[0];
    if (out.size() > 1) routing_.probability_sums.back() = out[1];  // now with a graph
  }
  return m.norm->forward(x);
}

torch::Tensor Decoder::embed(const torch::Tensor& input_ids) {
  auto x = model_->embed_tokens->forward(input_ids);
  if (config_.embed_scale) {
    // Gemma: sqrt(hidden) as an fp32 scalar, rounded to the embedding's dtype before it multiplies
    // (sqrt(1152) = 33.94 becomes 34 in bf16), as Hugging Face's scaled embedding does.
    const double root = std::sqrt(static_cast<double>(config_.hidden));
    x = x * torch::scalar_tensor(root, torch::kFloat32).to(x.scalar_type()).to(x.device());
  }
  return x;
}

torch::Tensor Decoder::head(const torch::Tensor& x) {
  if (lm_head_) return lm_head_->forward(x);
  // Tied head: a second use of embed_tokens, with its own hooks.
  auto& m = *model_;
  return run_module(*m.embed_tokens,
                    [&] { return pstar::model::linear(x, m.embed_tokens->weight.to(x.device())); });
}

// Note [checkpointed routing]
// Under activation checkpointing a layer's first forward runs without a graph, so a sparse layer's
// router probability sums, which the load-balancing loss differentiates when it trains, are
// returned as a side output of the checkpoint: the record keeps that output, whose graph leads
// back into the checkpoint, and the gradient reaching it flows through the router again in the
// recomputation, with the layer output's. The recomputation records nothing (it would count the
// layer's tokens twice); its own sums are the side output there.
bool Decoder::set_activation_checkpointing(bool on) {
  checkpointing_ = on;
  return true;
}

// Note [router aux loss]
// Hugging Face's load-balancing loss over the sparse layers' L·T routings of a forward: with f_e
// the share of the (token, slot) choices that fell to expert e and P_e the mean router probability
// of e, E·Σ_e f_e·P_e (load_balancing_loss_func), added times router_aux_loss_coef when the config
// sets output_router_logits. f is counted, P differentiated through the probabilities' sums each
// block keeps ([E] per layer, with their graph only when the loss trains). The probabilities are
// the blocks' own fp32 softmax (Hugging Face recomputes it in the logits' dtype: the same in fp32).
CausalLM::AuxiliaryLoss Decoder::auxiliary_loss() {
  if (!config_.moe || routing_.tokens.empty()) return {};
  const auto routings =
      static_cast<double>(routing_.tokens_per_layer * static_cast<int64_t>(routing_.tokens.size()));
  // f_e sums Hugging Face's per-slot shares over the top_k slots: count_e / (L·T).
  const torch::Tensor share = torch::stack(routing_.tokens).sum(0).to(torch::kFloat32) / routings;
  const torch::Tensor probability = torch::stack(routing_.probability_sums).sum(0) / routings;
  const torch::Tensor value = (share.to(probability.device()) * probability).sum() *
                              static_cast<double>(config_.moe->experts);
  return {value, config_.moe->aux_loss ? config_.moe->aux_loss_coef : 0.0};
}

torch::Tensor Decoder::expert_tokens() {
  if (!config_.moe || routing_.tokens.empty()) return {};
  return torch::stack(routing_.tokens);
}

std::vector<std::string> Decoder::expert_parameters(int64_t sparse_layer, int64_t expert) {
  std::shared_ptr<DecoderMoe> block;
  int64_t seen = 0;
  for (const auto& layer : model_->layers)
    if (layer->moe && seen++ == sparse_layer) block = layer->moe;
  PSTAR_INTERNAL_ASSERT(
      block && expert >= 0 && expert < static_cast<int64_t>(block->experts.size()), "no expert ",
      expert, " in sparse layer ", sparse_layer);
  // Named as the whole model names them: found by identity, whatever the modules' paths.
  std::vector<const c10::TensorImpl*> own;
  for (const auto& p : block->experts[static_cast<size_t>(expert)]->parameters())
    own.push_back(p.unsafeGetTensorImpl());
  std::vector<std::string> names;
  for (const auto& item : named_parameters())
    if (std::find(own.begin(), own.end(), item.value().unsafeGetTensorImpl()) != own.end())
      names.push_back(item.key());
  return names;
}

torch::Tensor Decoder::forward(const torch::Tensor& input_ids) {
  return head(hidden(input_ids, torch::Tensor(), torch::Tensor()));
}

torch::Tensor Decoder::forward_records(const torch::Tensor& input_ids,
                                       const RecordInputs& records) {
  const torch::Tensor x = hidden(input_ids, records.positions, records.segments);
  return head(x.reshape({-1, x.size(-1)}).index_select(0, records.rows));
}

}  // namespace pstar::model
