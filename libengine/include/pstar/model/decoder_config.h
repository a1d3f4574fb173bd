// What one decoder-only network of the Llama lineage is (Llama 2/3, Mistral, Qwen2, Qwen3, Gemma 3,
// Phi-3/Phi-4): every field the maths reads, filled once from a Hugging Face config.json or a
// preset and validated once. Code reads these fields and never a family's name: the differences
// between families are rows of the table in family.h (Note [families as data]). Free of LibTorch,
// so planners (pstar estimate) and checkpoint tools use it without building a model.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstar::model {

struct DecoderFamily;  // family.h

// How an RMSNorm applies its weight to the normalised x̂ (computed in fp32 either way).
enum class NormKind : uint8_t {
  kWeight,  // w · x̂ cast to the input's dtype (Llama, Mistral, Qwen, Phi-3); w starts at 1
  kOnePlusWeight,  // (x̂ · (1 + w)) in fp32, then cast (Gemma); w starts at 0
};

// The gated MLP's activation: down(act(gate(x)) · up(x)).
enum class MlpActivation : uint8_t {
  kSilu,      // "silu"
  kGeluTanh,  // "gelu_pytorch_tanh": GELU's tanh approximation
};
const char* mlp_activation_name(MlpActivation a);  // Hugging Face's spelling
// The activation Hugging Face's name `name` computes, or nullopt for one pstar does not.
std::optional<MlpActivation> parse_mlp_activation(const std::string& name);

// What one layer's attention sees: every earlier position, or the last `sliding_window` of them
// (the query's own included). Hugging Face's layer_types spell them "full_attention" and
// "sliding_attention".
enum class LayerKind : uint8_t { kFull, kSliding };
inline constexpr int kLayerKinds = 2;
const char* layer_kind_name(LayerKind kind);  // "full_attention", "sliding_attention"

// One layer kind's rotary embedding. rope_type "default" rotates by theta^(-2i/d); "linear" divides
// every inverse frequency by `factor` (Gemma 3's global layers); "llama3" divides long wavelengths
// by `factor`, keeps short ones and interpolates between (Note [llama3 rope] in decoder.cpp).
enum class RopeType : uint8_t { kDefault, kLinear, kLlama3 };
const char* rope_type_name(RopeType type);  // "default", "linear", "llama3"

struct RopeConfig {
  double theta = 10000;
  RopeType type = RopeType::kDefault;
  double factor = 1;                                // linear, llama3
  double low_freq_factor = 1;                       // llama3
  double high_freq_factor = 4;                      // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
  bool operator==(const RopeConfig& o) const;
  bool operator!=(const RopeConfig& o) const { return !(*this == o); }
};

// A decoder that a Hugging Face folder keeps inside a larger model (Gemma 3's 4B-27B are
// Gemma3ForConditionalGeneration, model_type "gemma3": the shape under text_config, the weights
// under language_model.model.* or model.language_model.*, beside a vision tower pstar does not
// train). merge-ckpt writes the folder back the same way, the other parts copied from it.
struct HfWrapper {
  std::string model_type;     // the folder's "model_type", e.g. "gemma3"
  std::string config_key;     // where the decoder's shape is, e.g. "text_config"
  std::string weight_prefix;  // in place of "model.", e.g. "language_model.model."
  std::string head_prefix;    // in place of "lm_head.", e.g. "language_model.lm_head."
};

// How the folder a decoder was read from spells its weights, beyond its family's names; merge-ckpt
// writes the same. Defaults: the family's own names, as its Hub checkpoints spell them.
struct HfLayout {
  std::optional<HfWrapper> wrapper;  // set only when read from such a folder
  // Experts as transformers 5 saves them: one experts.gate_up_proj [E, 2I, H] and one
  // experts.down_proj [E, H, I] a layer, instead of three tensors per expert.
  bool fused_experts = false;
};

// A mixture-of-experts block in place of the gated MLP (Note [moe block] in decoder.cpp): a router
// (a linear map to `experts` logits), softmax in fp32, the top `top_k` experts of each token,
// their weights renormalised to sum to 1 where `normalize_top_k`, each expert a gated MLP of width
// `expert_intermediate` over its tokens, the weighted sum. No token is dropped.
struct MoeConfig {
  int64_t experts = 0;              // num_local_experts (Mixtral), num_experts (Qwen3-MoE)
  int64_t top_k = 0;                // num_experts_per_tok
  int64_t expert_intermediate = 0;  // intermediate_size (Mixtral), moe_intermediate_size
  bool normalize_top_k = true;      // norm_topk_prob (Qwen3-MoE); Mixtral always renormalises
  double aux_loss_coef = 0;         // router_aux_loss_coef
  bool aux_loss = false;    // output_router_logits: the load-balancing loss joins the training loss
  int64_t sparse_step = 1;  // decoder_sparse_step: layers l with (l + 1) % step == 0
  std::vector<int64_t> dense_layers;  // mlp_only_layers: a dense MLP of width intermediate
  // Whether layer `layer` holds experts.
  bool sparse(int64_t layer) const;
  bool operator==(const MoeConfig& o) const;
};

// The RMSNorms of a decoder.
struct DecoderNorms {
  double eps = 1e-6;  // rms_norm_eps
  NormKind kind = NormKind::kWeight;
  bool sandwich = false;  // four norms a block: post_attention_ and post_feedforward_layernorm
                          // after each sublayer, pre_feedforward_layernorm before the MLP
  bool qk = false;        // q_norm, k_norm: RMSNorm over each head's head_dim, before RoPE
};

// What each layer's attention sees and how it rotates.
struct AttentionConfig {
  // One kind per layer (layers entries; empty: every layer full), and the sliding ones' window.
  std::vector<LayerKind> layer_kinds;
  std::optional<int64_t> sliding_window;
  // Each layer kind's rotary embedding, indexed by LayerKind; equal unless the family gives
  // sliding layers their own (Gemma 3's rope_local_base_freq).
  std::array<RopeConfig, kLayerKinds> rope;
  double query_pre_attn_scalar = 0;  // scores scaled by its -1/2 power; 0: head_dim's
};

struct DecoderConfig {
  // The family's row (family.h), which spells this config in config.json and its weights in
  // checkpoints; never null. The maths reads only the fields below.
  const DecoderFamily* family;

  // Hugging Face's field names in comments.
  int64_t hidden = 0;            // hidden_size
  int64_t intermediate = 0;      // intermediate_size (the gated MLP's width)
  int64_t layers = 0;            // num_hidden_layers
  int64_t heads = 0;             // num_attention_heads
  int64_t kv_heads = 0;          // num_key_value_heads (grouped-query attention)
  int64_t head_dim = 0;          // head_dim; hidden / heads when the file has none
  int64_t vocab_size = 0;        // vocab_size
  int64_t seq_len = 2048;        // the training sequence length (model.seq_len), ≤ max_positions
  int64_t max_positions = 2048;  // max_position_embeddings

  DecoderNorms norms;
  AttentionConfig attention;
  bool embed_scale = false;  // embeddings times sqrt(hidden), rounded to the embedding's dtype
  MlpActivation activation = MlpActivation::kSilu;
  struct {
    bool qkv = false;  // biases on q/k/v_proj
    bool o = false;    // a bias on o_proj
    bool mlp = false;  // biases on gate/up/down_proj
  } bias;
  bool tie_word_embeddings = false;  // lm_head shares model.embed_tokens.weight
  // pad_token_id: nn.Embedding's padding_idx, the row whose lookups give no gradient (it starts
  // at 0). Gemma 3's is 0, Phi-4's 100257 (its <|endoftext|>, a token that occurs in data).
  std::optional<int64_t> pad_token_id;

  std::optional<MoeConfig> moe;  // mixture-of-experts layers, or none
  HfLayout hf;                   // how the folder read spells the weights

  DecoderConfig();  // the llama row, no shape

  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
  LayerKind layer_kind(int64_t layer) const {
    const auto& kinds = attention.layer_kinds;
    return kinds.empty() ? LayerKind::kFull : kinds[static_cast<size_t>(layer)];
  }
  const RopeConfig& rope_of(LayerKind kind) const {
    return attention.rope[static_cast<size_t>(kind)];
  }
  bool has_sliding_layers() const;
  // The scale of q·kᵀ: query_pre_attn_scalar^-1/2, else head_dim^-1/2.
  double query_scale() const;
  // Norms a block holds: 2, or 4 with sandwich norms.
  int norms_per_block() const { return norms.sandwich ? 4 : 2; }
  // Exact parameter count (a tied head counted once; every expert).
  int64_t num_params() const;
  // Parameters one token computes with: the router and its top_k experts of each sparse layer in
  // place of all of them (the count FLOPs scale with).
  int64_t active_params() const;
  // Whether layer `layer` is a mixture of experts.
  bool sparse_layer(int64_t layer) const { return moe && moe->sparse(layer); }
  // The Hugging Face model_type of the family row.
  const char* model_type() const;
};

}  // namespace pstar::model
