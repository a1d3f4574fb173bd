// A decoder's validation, leaf-module sizes, parameter names and shapes, and the checkpoint
// tensors that hold them (pstar/model/decoder_shape.h).
#include "pstar/model/decoder_shape.h"

#include <algorithm>
#include <map>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/model/family.h"

namespace pstar::model {

void validate_decoder_config(const DecoderConfig& c, const std::string& source) {
  const std::pair<const char*, int64_t> sizes[] = {{"hidden_size", c.hidden},
                                                   {"intermediate_size", c.intermediate},
                                                   {"num_hidden_layers", c.layers},
                                                   {"num_attention_heads", c.heads},
                                                   {"num_key_value_heads", c.kv_heads},
                                                   {"head_dim", c.head_dim},
                                                   {"vocab_size", c.vocab_size},
                                                   {"seq_len", c.seq_len},
                                                   {"max_position_embeddings", c.max_positions}};
  for (const auto& [key, value] : sizes)
    PSTAR_CHECK(value > 0, ConfigError, source, ": ", key, " must be positive, found ", value);
  PSTAR_CHECK(c.heads % c.kv_heads == 0, ConfigError, source, ": num_attention_heads (", c.heads,
              ") must be a multiple of num_key_value_heads (", c.kv_heads,
              "): each key/value head serves a whole group of query heads");
  PSTAR_CHECK(c.head_dim % 2 == 0, ConfigError, source, ": head_dim ", c.head_dim,
              " must be even: rotary embeddings rotate pairs of channels");
  PSTAR_CHECK(c.seq_len <= c.max_positions, ConfigError, source, ": seq_len ", c.seq_len,
              " exceeds max_position_embeddings ", c.max_positions,
              "; use a shorter model.seq_len");
  PSTAR_CHECK(c.attention.layer_kinds.empty() ||
                  static_cast<int64_t>(c.attention.layer_kinds.size()) == c.layers,
              ConfigError, source, ": layer_types lists ", c.attention.layer_kinds.size(),
              " layers but num_hidden_layers is ", c.layers);
  PSTAR_CHECK(
      !c.has_sliding_layers() || (c.attention.sliding_window && *c.attention.sliding_window > 0),
      ConfigError, source, ": sliding_attention layers need a positive sliding_window, found ",
      c.attention.sliding_window ? std::to_string(*c.attention.sliding_window)
                                 : std::string("none"));
  PSTAR_CHECK(c.moe.has_value() == (c.family->moe != nullptr), ConfigError, source, ": ",
              c.model_type(),
              c.family->moe ? " models need their experts" : " models have no experts");
  if (c.moe) {
    const MoeConfig& m = *c.moe;
    PSTAR_CHECK(m.experts > 0 && m.top_k > 0 && m.top_k <= m.experts, ConfigError, source,
                ": num_experts_per_tok ", m.top_k, " must be between 1 and the ", m.experts,
                " experts");
    PSTAR_CHECK(m.expert_intermediate > 0 && m.sparse_step > 0, ConfigError, source,
                ": the experts' width (", m.expert_intermediate, ") and decoder_sparse_step (",
                m.sparse_step, ") must be positive");
  }
  PSTAR_CHECK(!c.pad_token_id || (*c.pad_token_id >= 0 && *c.pad_token_id < c.vocab_size),
              ConfigError, source, ": pad_token_id ", c.pad_token_id.value_or(0),
              " is not a token id below vocab_size ", c.vocab_size);
  PSTAR_CHECK(c.norms.eps > 0, ConfigError, source, ": rms_norm_eps must be positive, found ",
              c.norms.eps);
  PSTAR_CHECK(c.attention.query_pre_attn_scalar >= 0, ConfigError, source,
              ": query_pre_attn_scalar must be positive, found ",
              c.attention.query_pre_attn_scalar);
  for (int k = 0; k < kLayerKinds; ++k) {
    const RopeConfig& r = c.attention.rope[static_cast<size_t>(k)];
    const char* kind = layer_kind_name(static_cast<LayerKind>(k));
    PSTAR_CHECK(r.theta > 0, ConfigError, source, ": the rope_theta of ", kind,
                " layers must be positive, found ", r.theta);
    PSTAR_CHECK(r.type == RopeType::kDefault || r.factor > 0, ConfigError, source, ": the ",
                rope_type_name(r.type), " rope factor of ", kind,
                " layers must be positive, found ", r.factor);
    PSTAR_CHECK(r.type != RopeType::kLlama3 || r.high_freq_factor > r.low_freq_factor, ConfigError,
                source, ": rope high_freq_factor (", r.high_freq_factor,
                ") must exceed low_freq_factor (", r.low_freq_factor, ")");
  }
}

namespace {

// The leaves of one layer in construction (= use) order, with their parameters: weight shape
// [rows, cols] (a norm's [rows]) and whether a bias follows. Both the counts and the names come
// from here, so they cannot disagree.
struct Leaf {
  std::string name;    // under the layer's prefix, without ".weight"
  int64_t rows, cols;  // cols 0: a vector
  bool bias;
};

// A sparse layer's block (Note [moe block] in decoder.cpp): the router, then each expert's gate,
// up and down projections, expert by expert.
void moe_leaves(const DecoderConfig& c, std::vector<Leaf>& leaves) {
  const MoeSpelling& names = *c.family->moe;
  const int64_t h = c.hidden, inter = c.moe->expert_intermediate;
  const std::string block = names.block;
  leaves.push_back({block + ".gate", c.moe->experts, h, false});
  for (int64_t e = 0; e < c.moe->experts; ++e) {
    const std::string expert = block + ".experts." + std::to_string(e) + ".";
    leaves.push_back({expert + names.gate, inter, h, false});
    leaves.push_back({expert + names.up, inter, h, false});
    leaves.push_back({expert + names.down, h, inter, false});
  }
}

std::vector<Leaf> layer_leaves(const DecoderConfig& c, bool sparse) {
  const int64_t h = c.hidden, q = c.q_width(), kv = c.kv_width(), inter = c.intermediate;
  std::vector<Leaf> leaves;
  leaves.push_back({"input_layernorm", h, 0, false});
  leaves.push_back({"self_attn.q_proj", q, h, c.bias.qkv});
  leaves.push_back({"self_attn.k_proj", kv, h, c.bias.qkv});
  leaves.push_back({"self_attn.v_proj", kv, h, c.bias.qkv});
  if (c.norms.qk) {
    leaves.push_back({"self_attn.q_norm", c.head_dim, 0, false});
    leaves.push_back({"self_attn.k_norm", c.head_dim, 0, false});
  }
  leaves.push_back({"self_attn.o_proj", h, q, c.bias.o});
  leaves.push_back({"post_attention_layernorm", h, 0, false});
  if (c.norms.sandwich) leaves.push_back({"pre_feedforward_layernorm", h, 0, false});
  if (sparse) {
    moe_leaves(c, leaves);
  } else {
    leaves.push_back({"mlp.gate_proj", inter, h, c.bias.mlp});
    leaves.push_back({"mlp.up_proj", inter, h, c.bias.mlp});
    leaves.push_back({"mlp.down_proj", h, inter, c.bias.mlp});
  }
  if (c.norms.sandwich) leaves.push_back({"post_feedforward_layernorm", h, 0, false});
  return leaves;
}

int64_t leaf_numel(const Leaf& l) {
  return l.cols == 0 ? l.rows : l.rows * l.cols + (l.bias ? l.rows : 0);
}

}  // namespace

std::vector<int64_t> decoder_leaf_module_numels(const DecoderConfig& c) {
  // Counted from the per-layer leaves once and repeated: `pstar estimate` lays out thousands of
  // candidate shapes, and naming every parameter of each would dominate its time. The model test
  // checks both orders agree.
  // A dense and a sparse layer's leaves, counted once each.
  std::vector<int64_t> dense, sparse;
  for (const Leaf& l : layer_leaves(c, false)) dense.push_back(leaf_numel(l));
  if (c.moe)
    for (const Leaf& l : layer_leaves(c, true)) sparse.push_back(leaf_numel(l));
  std::vector<int64_t> numels;
  numels.reserve(std::max(dense.size(), sparse.size()) * static_cast<size_t>(c.layers) + 3);
  numels.push_back(c.vocab_size * c.hidden);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::vector<int64_t>& layer = c.sparse_layer(i) ? sparse : dense;
    numels.insert(numels.end(), layer.begin(), layer.end());
  }
  numels.push_back(c.hidden);
  if (!c.tie_word_embeddings) numels.push_back(c.vocab_size * c.hidden);
  return numels;
}

std::vector<ParameterShape> decoder_parameter_shapes(const DecoderConfig& c) {
  std::vector<ParameterShape> params;
  int64_t leaf = 0;
  auto add = [&](const std::string& prefix, int64_t rows, int64_t cols, bool bias) {
    std::vector<int64_t> weight = cols == 0 ? std::vector<int64_t>{rows} : std::vector{rows, cols};
    params.push_back({prefix + ".weight", std::move(weight), leaf});
    if (bias) params.push_back({prefix + ".bias", {rows}, leaf});
    ++leaf;
  };
  add("model.embed_tokens", c.vocab_size, c.hidden, false);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    for (const Leaf& l : layer_leaves(c, c.sparse_layer(i)))
      add(layer + l.name, l.rows, l.cols, l.bias);
  }
  add("model.norm", c.hidden, 0, false);
  if (!c.tie_word_embeddings) add("lm_head", c.vocab_size, c.hidden, false);
  return params;
}

namespace {

// The parameter's name in a folder of config.hf.wrapper's layout.
std::string wrapped_name(const DecoderConfig& c, const std::string& name) {
  if (!c.hf.wrapper) return name;
  if (starts_with(name, "model.")) return c.hf.wrapper->weight_prefix + name.substr(6);
  if (starts_with(name, "lm_head.")) return c.hf.wrapper->head_prefix + name.substr(8);
  return name;
}

// Where a parameter lands in the folder: a tensor of its own, or a part of a fused one. `shape` is
// the fused tensor's whole shape where it is known in advance (experts), else empty (Phi-3's
// projections grow by each part's rows).
struct Target {
  std::string name;
  std::vector<int64_t> shape;
  bool fused = false;
};

// Phi-3's fused projections: the parts a fused tensor stacks, in order, under its name.
struct Fusion {
  const char* fused;
  std::vector<const char*> parts;
};
const std::vector<Fusion>& fusions() {
  static const std::vector<Fusion> f = {
      {"self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
      {"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"}},
  };
  return f;
}

Target projection_target(const std::string& name) {
  for (const Fusion& f : fusions())
    for (const char* part : f.parts) {
      const std::string from = std::string(".") + part + ".";
      const size_t at = name.find(from);
      if (at != std::string::npos)
        return {name.substr(0, at) + "." + f.fused + "." + name.substr(at + from.size()), {}, true};
    }
  return {name, {}, false};
}

// transformers 5's experts (HfLayout::fused_experts): the router under mlp.gate, each layer's
// experts in experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows) and
// experts.down_proj [E, H, I], without a ".weight".
Target expert_target(const DecoderConfig& c, const std::string& name) {
  const MoeSpelling& m = *c.family->moe;
  const std::string block = std::string(".") + m.block + ".";
  const size_t at = name.find(block);
  if (at == std::string::npos) return {name, {}, false};
  const std::string layer = name.substr(0, at) + ".mlp.";
  const std::string rest = name.substr(at + block.size());
  if (starts_with(rest, "gate.")) return {layer + rest, {}, false};
  // Not a block's: Qwen3-MoE's dense layers (mlp_only_layers) have their MLP under mlp too.
  if (!starts_with(rest, "experts.")) return {name, {}, false};
  const int64_t e = c.moe->experts, h = c.hidden, inter = c.moe->expert_intermediate;
  const std::string projection = rest.substr(rest.find('.', 8) + 1);  // after "experts.J."
  if (starts_with(projection, std::string(m.down) + "."))
    return {layer + "experts.down_proj", {e, h, inter}, true};
  return {layer + "experts.gate_up_proj", {e, 2 * inter, h}, true};
}

}  // namespace

std::vector<CheckpointTensor> decoder_checkpoint_tensors(const DecoderConfig& c) {
  std::vector<CheckpointTensor> out;
  std::map<std::string, size_t> fused;  // a fused tensor's name -> its index in `out`
  for (const ParameterShape& p : decoder_parameter_shapes(c)) {
    Target target{p.name, {}, false};
    if (c.family->fused_projections) {
      target = projection_target(p.name);
    } else if (c.moe && c.hf.fused_experts) {
      target = expert_target(c, p.name);
    }
    target.name = wrapped_name(c, target.name);
    // A part's rows: along dimension 0 of its fused tensor viewed as [numel / last, last].
    const CheckpointTensor::Part part{p.name, p.shape[0]};
    if (!target.fused) {
      out.push_back({target.name, p.shape, {part}});
      continue;
    }
    const auto [it, first] = fused.emplace(target.name, out.size());
    if (first) {
      std::vector<int64_t> shape = target.shape.empty() ? p.shape : target.shape;
      out.push_back({target.name, std::move(shape), {part}});
      continue;
    }
    CheckpointTensor& t = out[it->second];
    if (target.shape.empty()) t.shape[0] += p.shape[0];
    t.parts.push_back(part);
  }
  return out;
}

}  // namespace pstar::model
