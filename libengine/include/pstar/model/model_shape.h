// The architecture a config trains, resolved once from model.type, model.preset, model.init_from
// (a Hugging Face folder's config.json) and the shape keys beside them: which family, its exact
// shape, and what planners need of it (parameter counts, leaf-module sizes, the embeddings,
// every parameter's name and shape). Free of LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pstar/model/decoder_config.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/parameter_shape.h"

namespace pstar::config {
struct ModelConfig;
}

namespace pstar::model {

// The two networks pstar builds: GPT-2 (learned positions, LayerNorm, Conv1D layout, a plain GELU
// MLP) and the decoder whose families are rows of family.h (Note [families as data]).
enum class ModelFamily : uint8_t { kGpt, kDecoder };
const char* model_family_name(ModelFamily family);  // "gpt", "decoder"

struct ModelShape {
  ModelFamily family = ModelFamily::kGpt;
  GptConfig gpt;          // family kGpt
  DecoderConfig decoder;  // family kDecoder
  // model.init_from when it names a Hugging Face folder (its config.json gave the shape); empty
  // otherwise.
  std::string hf_folder;

  int64_t num_params() const;
  int64_t vocab_size() const;
  int64_t seq_len() const;
  int64_t hidden() const;
  int64_t layers() const;
  // Leaf modules that own parameters, in construction (= use) order, and which of them are
  // embedding tables (engine.use_cpu_embedding keeps those on the host).
  std::vector<int64_t> leaf_numels() const;
  std::vector<bool> embedding_leaves() const;
  std::vector<ParameterShape> parameter_shapes() const;
  // "qwen3: 8 layers, hidden 512, 8/2 heads of 64, ... 30.1M parameters" for the log.
  std::string describe() const;
};

// Resolves the model a config section describes. model.type is "gpt", "decoder" ("llama", its
// former name) or unset (then the preset's, or the folder's model_type decides, else gpt). With
// model.init_from naming a folder, the shape comes from its config.json and a shape key given
// beside it must agree (ConfigError naming both values), except model.seq_len, the training length,
// which may be anything up to the folder's max_position_embeddings.
ModelShape resolve_model_shape(const config::ModelConfig& model);

// The config.json of a Hugging Face folder holding `shape`'s weights in `torch_dtype`
// ("bfloat16", "float16", "float32"): the decoder family's (hf_decoder_config.h), or
// GPT2LMHeadModel's. resolve_model_shape reads it back as the same shape. A decoder read from a
// wrapping folder (DecoderConfig::wrapper) gets the wrapper's config.json, that folder's own with
// the decoder's section rewritten.
std::string hf_config_json(const ModelShape& shape, const std::string& torch_dtype);

}  // namespace pstar::model
