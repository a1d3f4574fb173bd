// A decoder's shapes (decoder_config.h): the published presets, validation, the leaf-module sizes
// the chunk plan needs, every parameter's name and shape, and how checkpoints spell them. Free of
// LibTorch, so planners (pstar estimate) and checkpoint tools use it without building a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pstar/model/decoder_config.h"
#include "pstar/model/parameter_shape.h"

namespace pstar::model {

struct DecoderPreset {
  const char* name;
  DecoderConfig config;
};
// The published shapes (docs/models.md): Llama 2/3, Mistral, Qwen2.5, Qwen3, Gemma 3, Phi-4, and
// llama-tiny for tests and CPU examples.
const std::vector<DecoderPreset>& decoder_presets();
// The preset called `name`, or null.
const DecoderConfig* find_decoder_preset(const std::string& name);
// "llama-tiny, llama-3.2-1b, ..." for errors.
std::string decoder_preset_names();

// Checks a shape: ConfigError naming the field (HF's name) and saying what would work.
void validate_decoder_config(const DecoderConfig& config, const std::string& source);

// Element counts of each leaf module that owns parameters, in construction (= use) order:
// embed_tokens; per layer input_layernorm, q_proj, k_proj, v_proj, [q_norm, k_norm], o_proj,
// post_attention_layernorm, [pre_feedforward_layernorm], gate_proj, up_proj, down_proj,
// [post_feedforward_layernorm]; then norm and, untied, lm_head.
std::vector<int64_t> decoder_leaf_module_numels(const DecoderConfig& config);

// Every parameter as model/decoder.cpp builds it, in construction order: its name (Hugging Face's
// for a plain decoder, e.g. "model.layers.0.self_attn.q_proj.weight"), shape, and leaf index in
// decoder_leaf_module_numels' order. Checkpoints of pstar's own use these names.
std::vector<ParameterShape> decoder_parameter_shapes(const DecoderConfig& config);

// One tensor of a Hugging Face folder and the parameters it holds: one, or several stacked in order
// along dimension 0 of the tensor viewed as [numel / last, last] (fused: Phi-3's qkv_proj holds
// q_proj, k_proj and v_proj; transformers 5's experts.gate_up_proj [E, 2I, H] holds each expert's
// gate and up projections, expert by expert).
struct CheckpointTensor {
  struct Part {
    std::string parameter;  // decoder_parameter_shapes' name
    int64_t rows = 0;       // its extent along that dimension 0
  };
  std::string name;  // in the folder
  std::vector<int64_t> shape;
  std::vector<Part> parts;
};
// The folder's tensors for `config`, in the order of their first parameter: each parameter's name
// with the wrapper's prefixes (config.hf.wrapper), the family's fused projections joined, and the
// experts fused where the folder fuses them (config.hf.fused_experts).
std::vector<CheckpointTensor> decoder_checkpoint_tensors(const DecoderConfig& config);

}  // namespace pstar::model
