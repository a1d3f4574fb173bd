// A decoder's validation, leaf-module sizes, parameter names and shapes, and the checkpoint
// tensors that hold them (pstar/model/decoder_shape.h).
#include "pstar/model/decoder_shape.h"

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
  const char* name;    // under the layer's prefix, without ".weight"
  int64_t rows, cols;  // cols 0: a vector
  bool bias;
};

std::vector<Leaf> layer_leaves(const DecoderConfig& c) {
  const int64_t h = c.hidden, q = c.q_width(), kv = c.kv_width(), inter = c.intermediate;
  std::vector<Leaf> leaves;
  leaves.push_back({"input_layernorm", h, 0, false});
  leaves.push_back({"self_attn.q_proj", q, h, c.qkv_bias});
  leaves.push_back({"self_attn.k_proj", kv, h, c.qkv_bias});
  leaves.push_back({"self_attn.v_proj", kv, h, c.qkv_bias});
  if (c.norms.qk) {
    leaves.push_back({"self_attn.q_norm", c.head_dim, 0, false});
    leaves.push_back({"self_attn.k_norm", c.head_dim, 0, false});
  }
  leaves.push_back({"self_attn.o_proj", h, q, c.o_bias});
  leaves.push_back({"post_attention_layernorm", h, 0, false});
  if (c.norms.sandwich) leaves.push_back({"pre_feedforward_layernorm", h, 0, false});
  leaves.push_back({"mlp.gate_proj", inter, h, c.mlp_bias});
  leaves.push_back({"mlp.up_proj", inter, h, c.mlp_bias});
  leaves.push_back({"mlp.down_proj", h, inter, c.mlp_bias});
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
  std::vector<int64_t> layer;
  for (const Leaf& l : layer_leaves(c)) layer.push_back(leaf_numel(l));
  std::vector<int64_t> numels;
  numels.reserve(layer.size() * static_cast<size_t>(c.layers) + 3);
  numels.push_back(c.vocab_size * c.hidden);
  for (int64_t i = 0; i < c.layers; ++i) numels.insert(numels.end(), layer.begin(), layer.end());
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
  const std::vector<Leaf> leaves = layer_leaves(c);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    for (const Leaf& l : leaves) add(layer + l.name, l.rows, l.cols, l.bias);
  }
  add("model.norm", c.hidden, 0, false);
  if (!c.tie_word_embeddings) add("lm_head", c.vocab_size, c.hidden, false);
  return params;
}

namespace {

// The parameter's name in a folder of config.wrapper's layout.
std::string wrapped_name(const DecoderConfig& c, const std::string& name) {
  if (!c.wrapper) return name;
  if (starts_with(name, "model.")) return c.wrapper->weight_prefix + name.substr(6);
  if (starts_with(name, "lm_head.")) return c.wrapper->head_prefix + name.substr(8);
  return name;
}

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

}  // namespace

std::vector<CheckpointTensor> decoder_checkpoint_tensors(const DecoderConfig& c) {
  std::vector<CheckpointTensor> out;
  for (const ParameterShape& p : decoder_parameter_shapes(c)) {
    CheckpointTensor t;
    t.name = wrapped_name(c, p.name);
    t.shape = p.shape;
    t.parts.push_back({p.name, p.shape[0]});
    if (c.family->fused_projections) {
      // q/k/v_proj (gate/up_proj) arrive in a row: the first part opens the fused tensor, the
      // others join the last one.
      const Fusion* fusion = nullptr;
      size_t index = 0;
      for (const Fusion& f : fusions())
        for (size_t k = 0; k < f.parts.size(); ++k)
          if (p.name.find(std::string(".") + f.parts[k] + ".") != std::string::npos) {
            fusion = &f;
            index = k;
          }
      if (fusion != nullptr) {
        const std::string from = std::string(".") + fusion->parts[index] + ".";
        const size_t at = p.name.find(from);
        const std::string fused_name =
            p.name.substr(0, at) + "." + fusion->fused + "." + p.name.substr(at + from.size());
        if (index > 0) {
          PSTAR_INTERNAL_ASSERT(!out.empty() && out.back().name == wrapped_name(c, fused_name),
                                "fused part ", p.name, " does not follow its tensor");
          out.back().shape[0] += p.shape[0];
          out.back().parts.push_back({p.name, p.shape[0]});
          continue;
        }
        t.name = wrapped_name(c, fused_name);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace pstar::model
