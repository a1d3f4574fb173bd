// The GPT family's shapes: parameter counts, the preset ladder and the leaf-module sizes the chunk
// plan needs. Free of LibTorch, so planners (pstar estimate) use it without building a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pstar::config {
struct ModelConfig;
}

namespace pstar::model {

struct GptConfig {
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t vocab_size = 50257;
  int64_t seq_len = 1024;
  double layer_norm_eps = 1e-5;

  // Exact parameter count (tied LM head counted once).
  int64_t num_params() const;
};

struct GptPreset {
  const char* name;
  int64_t hidden;
  int64_t layers;
  int64_t heads;
  int64_t vocab_size;
  int64_t seq_len;
};

// The preset ladder: PatrickStar's names (GPT2_1B ... GPT_175B) and small CPU sizes
// (gpt-tiny, gpt-mini, gpt-small). docs/models.md lists them.
const std::vector<GptPreset>& gpt_presets();

// Preset + explicit overrides -> a validated shape. ConfigError names the model.* key at fault.
GptConfig resolve_gpt_config(const config::ModelConfig& model);

// Element counts of the parameters of each leaf module that owns parameters, in construction
// (= use) order: wte, wpe, then per block ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj, then ln_f. The chunk engine plans its chunk size from these before building.
std::vector<int64_t> gpt_leaf_module_numels(const GptConfig& config);

// One parameter of the GPT as model/gpt.cpp builds it: its name (Hugging Face GPT-2's, e.g.
// "transformer.h.0.attn.c_attn.weight"), its shape, and the index of its leaf module in
// gpt_leaf_module_numels' order.
struct GptParameterShape {
  std::string name;
  std::vector<int64_t> shape;
  int64_t leaf = 0;
};
// Every parameter in construction order (a leaf's weight before its bias). Lets checkpoint tools
// know the model's tensors without building it.
std::vector<GptParameterShape> gpt_parameter_shapes(const GptConfig& config);

}  // namespace pstar::model
