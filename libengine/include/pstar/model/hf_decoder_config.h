// A decoder's config.json, as transformers 4 and 5 write it, in and out (Note [rope in
// config.json]). Free of LibTorch.
#pragma once

#include <string>

#include "pstar/model/decoder_config.h"

namespace pstar::model {

// Reads a Hugging Face config.json's text (`source` names the file in errors) through the row of
// its model_type (family.h). ConfigError naming the file, the key and its value, and saying what is
// supported, for: a missing or wrong field; an unknown model_type (listing the known ones); RoPE
// given neither as rope_theta nor as rope_parameters, or a rope type other than default, linear
// and llama3 (LongRoPE, su, yarn, dynamic); partial_rotary_factor below 1; attention or final
// logit softcapping; use_bidirectional_attention; a layer_types entry other than full_attention
// and sliding_attention; an activation the family does not compute; dropout above 0.
DecoderConfig decoder_config_from_hf_json(const std::string& text, const std::string& source);

// The config.json Hugging Face loads for `config` (LlamaForCausalLM, Qwen3ForCausalLM,
// Gemma3ForCausalLM, Phi3ForCausalLM, ...), with `torch_dtype` ("bfloat16", "float16" or
// "float32"), in transformers 4's spelling, which transformers 5 also reads. A config read from a
// wrapping folder (config.wrapper) is written as the decoder alone: merge-ckpt puts it back into
// the wrapper's own config.json (`wrapped_config_json`).
std::string decoder_config_to_hf_json(const DecoderConfig& config, const std::string& torch_dtype);

// The wrapping folder's config.json `original` with the decoder's section (config.wrapper's
// config_key) replaced by `config`'s, and `torch_dtype` set.
std::string wrapped_config_json(const std::string& original, const DecoderConfig& config,
                                const std::string& torch_dtype, const std::string& source);

}  // namespace pstar::model
