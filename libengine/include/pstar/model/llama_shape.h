// The Llama family's shapes (Llama 2/3, Mistral, Qwen2): the fields of a Hugging Face config.json
// that decide the network, the published presets, parameter counts, the leaf-module sizes the chunk
// plan needs and every parameter's Hugging Face name and shape. Free of LibTorch, so planners
// (pstar estimate) and checkpoint tools use it without building a model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pstar/model/parameter_shape.h"

namespace pstar::model {

// rope_scaling of type "llama3" (Llama 3.1 and later): long wavelengths divided by `factor`, short
// ones kept, the band between them interpolated (Note [llama3 rope] in llama.cpp).
struct RopeScaling {
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};

// Hugging Face's field names in comments; `model_type` is "llama", "mistral" or "qwen2".
struct LlamaConfig {
  std::string model_type = "llama";
  int64_t hidden = 0;            // hidden_size
  int64_t intermediate = 0;      // intermediate_size (SwiGLU's width)
  int64_t layers = 0;            // num_hidden_layers
  int64_t heads = 0;             // num_attention_heads
  int64_t kv_heads = 0;          // num_key_value_heads (grouped-query attention)
  int64_t head_dim = 0;          // head_dim; hidden / heads when the file has none
  int64_t vocab_size = 0;        // vocab_size
  int64_t seq_len = 2048;        // the training sequence length (model.seq_len), ≤ max_positions
  int64_t max_positions = 2048;  // max_position_embeddings
  double rms_norm_eps = 1e-5;    // rms_norm_eps
  double rope_theta = 10000;     // rope_theta
  std::optional<RopeScaling> rope_scaling;  // rope_scaling of type "llama3"
  bool qkv_bias = false;             // biases on q/k/v_proj: attention_bias (Llama), always (Qwen2)
  bool o_bias = false;               // a bias on o_proj: attention_bias (Llama), never (Qwen2)
  bool mlp_bias = false;             // mlp_bias
  bool tie_word_embeddings = false;  // lm_head shares model.embed_tokens.weight
  std::optional<int64_t> sliding_window;  // Mistral's; seq_len must not exceed it

  // Exact parameter count (a tied head counted once).
  int64_t num_params() const;
  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
};

// The model types a Hugging Face config.json may name for this family.
const std::vector<std::string>& llama_model_types();

struct LlamaPreset {
  const char* name;
  LlamaConfig config;
};
// The published shapes: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-2-13b, mistral-7b
// (v0.1), qwen2.5-7b, qwen2.5-14b, llama-3.1-70b, and llama-tiny for tests and CPU examples.
const std::vector<LlamaPreset>& llama_presets();
// The preset called `name`, or null.
const LlamaConfig* find_llama_preset(const std::string& name);

// Reads a Hugging Face config.json's text (`source` names the file in errors). ConfigError naming
// the file and the key for a missing or wrong field, an unknown model_type (listing the known
// ones), an activation other than silu, or a rope_scaling type other than llama3.
LlamaConfig llama_config_from_hf_json(const std::string& text, const std::string& source);

// The config.json Hugging Face's LlamaForCausalLM (MistralForCausalLM, Qwen2ForCausalLM) loads
// for `config`, with `torch_dtype` ("bfloat16", "float16" or "float32").
std::string llama_config_to_hf_json(const LlamaConfig& config, const std::string& torch_dtype);

// Checks a shape: ConfigError naming the field (HF's name) and saying what would work.
void validate_llama_config(const LlamaConfig& config, const std::string& source);

// Element counts of each leaf module that owns parameters, in construction (= use) order:
// embed_tokens, then per layer input_layernorm, q_proj, k_proj, v_proj, o_proj,
// post_attention_layernorm, gate_proj, up_proj, down_proj; then norm and, untied, lm_head.
std::vector<int64_t> llama_leaf_module_numels(const LlamaConfig& config);

// Every parameter as model/llama.cpp builds it, in construction order: its Hugging Face name
// ("model.layers.0.self_attn.q_proj.weight"), shape, and leaf index in llama_leaf_module_numels'
// order.
std::vector<ParameterShape> llama_parameter_shapes(const LlamaConfig& config);

}  // namespace pstar::model
