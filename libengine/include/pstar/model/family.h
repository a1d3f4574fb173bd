// The decoder families pstar trains, as one table (Note [families as data]). Free of LibTorch.
//
// Note [families as data]
// Llama, Mistral, Qwen2, Qwen3, Gemma 3 and Phi-3 (Phi-4) are one network with switches: RMSNorm as
// w·x̂ or (1 + w)·x̂, two or four norms a block, q/k norms, a scaled embedding, the gated MLP's
// activation, biases, sliding-window layers with their own RoPE base, the query scale, fused
// projections in checkpoints. Each family is a row of decoder_families(): the switches its network
// always has, and how its config.json and checkpoints spell the rest. The row is looked up once,
// from config.json's model_type or a preset, when the DecoderConfig is made; from then on the
// model, the planner, the initialisation, pstar estimate and merge-ckpt read DecoderConfig's
// fields (and the row's spelling, through the functions of decoder_shape.h and
// hf_decoder_config.h), never a family's name. Adding a family is a row here, its presets, its
// name map where its checkpoints differ (fused projections), and its tests (docs/models.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pstar/model/decoder_config.h"

namespace pstar::model {

// Which attention projections carry biases.
enum class AttentionBias : uint8_t {
  kFromKey,    // q, k, v and o all follow attention_bias (default false)
  kQkvAlways,  // q, k and v always, o never (Qwen2)
  kNever,      // none, whatever the file says (Phi-3)
};

// Which layers slide when config.json has no layer_types list (a list, where present, decides).
enum class SlidingRule : uint8_t {
  kNever,          // none
  kAllLayers,      // every layer, when sliding_window is set (Mistral, Phi-3)
  kFromMaxWindow,  // with use_sliding_window, layers from max_window_layers on (Qwen2, Qwen3)
  kPattern,        // all but every sliding_window_pattern-th layer (Gemma 3: 5 local, 1 global)
};

// How a mixture-of-experts family spells its block (Note [moe block] in decoder.cpp).
struct MoeSpelling {
  const char* block;        // the block's module: "block_sparse_moe" (Mixtral), "mlp" (Qwen3-MoE)
  const char* experts_key;  // "num_local_experts", "num_experts"
  const char* width_key;    // the experts' width: "intermediate_size", "moe_intermediate_size"
  const char* gate;         // one expert's projections: w1, w3, w2 (Mixtral) or
  const char* up;           // gate_proj, up_proj, down_proj (Qwen3-MoE)
  const char* down;
  bool normalize_key;      // reads norm_topk_prob (else the top-k weights are always renormalised)
  bool sparse_layer_keys;  // reads decoder_sparse_step and mlp_only_layers
};

struct DecoderFamily {
  const char* model_type;    // config.json's "model_type"
  const char* architecture;  // its "architectures" entry, written back
  const char* description;   // for docs and errors, e.g. "Qwen3 (Qwen3ForCausalLM)"

  // What the network always has (copied into every DecoderConfig of the family).
  NormKind norm;
  bool sandwich_norms;
  bool qk_norm;
  bool embed_scale;

  // How config.json spells the rest.
  const char* activation_key;  // "hidden_act" or "hidden_activation"
  AttentionBias attention_bias;
  bool mlp_bias_key;  // reads mlp_bias (Llama)
  SlidingRule sliding;
  bool local_rope;             // sliding layers rotate by rope_local_base_freq
  bool query_pre_attn_scalar;  // reads query_pre_attn_scalar
  // The values Hugging Face's config class gives keys a file leaves out, as a JSON object: the
  // published Gemma 3 4B-27B folders give only a few keys of their text_config and rely on
  // Gemma3TextConfig for the rest, RoPE included. A key absent from both the file and these is
  // pstar's fallback where its reader has one (num_key_value_heads: the heads; head_dim: hidden /
  // heads), or an error (RoPE: Note [rope in config.json]).
  const char* hf_defaults;

  // How checkpoints spell the weights: q/k/v_proj stacked in one qkv_proj, gate/up_proj in one
  // gate_up_proj (Phi-3), split on load and joined on save (decoder_checkpoint_tensors).
  bool fused_projections;
  // The model_type of a folder that holds this decoder inside a larger model (HfWrapper), or null.
  const char* wrapper_model_type;
  // Its mixture-of-experts block, or null for a dense family.
  const MoeSpelling* moe;
};

// Every row, in the order docs/models.md lists them.
const std::vector<DecoderFamily>& decoder_families();
// The row whose model_type (or wrapper_model_type) is `model_type`, or null.
const DecoderFamily* find_decoder_family(const std::string& model_type);
// The sliding_window_pattern of the row's hf_defaults (kPattern rows), else 0.
int64_t default_sliding_pattern(const DecoderFamily& family);
// The row called "llama", the default.
const DecoderFamily& llama_family();
// "llama, mistral, qwen2, ..." for errors.
std::string decoder_family_names();

// A DecoderConfig of `family` with the network switches the row fixes and its hf_defaults'
// activation, rms_norm_eps and tie_word_embeddings, and no shape.
DecoderConfig family_defaults(const DecoderFamily& family);

// The layer kinds the row's rule gives `layers` layers when nothing lists them: every layer full,
// every layer sliding (kAllLayers), from `first_sliding` on (kFromMaxWindow), or all but every
// `pattern`-th (kPattern); all full when `sliding` is false.
std::vector<LayerKind> family_layer_kinds(const DecoderFamily& family, int64_t layers, bool sliding,
                                          int64_t first_sliding, int64_t pattern);

}  // namespace pstar::model
