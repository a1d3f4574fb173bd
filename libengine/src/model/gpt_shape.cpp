#include "pstar/model/gpt_shape.h"

#include <optional>
#include <string>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"

namespace pstar::model {

int64_t GptConfig::num_params() const {
  const int64_t h = hidden;
  // Per block: c_attn 3h²+3h, attn c_proj h²+h, c_fc 4h²+4h, mlp c_proj 4h²+h, two LayerNorms 4h.
  const int64_t per_block = 12 * h * h + 13 * h;
  return layers * per_block + vocab_size * h + seq_len * h + 2 * h;
}

const std::vector<GptPreset>& gpt_presets() {
  // PatrickStar's ladder (seq 1024, GPT-2 vocab) and GPT-2's own sizes, plus byte-vocab CPU sizes.
  static const std::vector<GptPreset> presets = {
      {"gpt-tiny", 64, 2, 4, 256, 64},           {"gpt-mini", 256, 4, 8, 256, 128},
      {"gpt2-small", 768, 12, 12, 50257, 1024},  {"gpt2-medium", 1024, 24, 16, 50257, 1024},
      {"gpt2-large", 1280, 36, 20, 50257, 1024}, {"gpt2-xl", 1600, 48, 25, 50257, 1024},
      {"GPT2_1B", 2048, 20, 16, 50257, 1024},    {"GPT2_2B", 2048, 40, 16, 50257, 1024},
      {"GPT2_4B", 2304, 64, 16, 50257, 1024},    {"GPT3_6B", 3072, 53, 16, 50257, 1024},
      {"GPT3_8B", 3072, 72, 16, 50257, 1024},    {"GPT3_10B", 4096, 50, 16, 50257, 1024},
      {"GPT3_12B", 4096, 60, 16, 50257, 1024},   {"GPT3_15B", 4096, 78, 16, 50257, 1024},
      {"GPT3_18B", 4096, 90, 16, 50257, 1024},   {"GPT_DS_20B", 8192, 25, 16, 50257, 1024},
      {"GPT_DS_40B", 8192, 50, 16, 50257, 1024}, {"GPT_DS_50B", 8192, 62, 16, 50257, 1024},
      {"GPT_DS_60B", 8192, 75, 16, 50257, 1024}, {"GPT_DS_68B", 9216, 66, 16, 50257, 1024},
      {"GPT_175B", 12288, 96, 96, 50257, 1024},
  };
  return presets;
}

namespace {

std::string preset_names() {
  std::string names;
  for (const auto& p : gpt_presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

}  // namespace

GptConfig resolve_gpt_config(const config::ModelConfig& model) {
  PSTAR_CHECK(model.type.empty() || model.type == "gpt", ConfigError,
              "model.type: unknown model type '", model.type, "'; expected \"gpt\"");
  GptConfig c;
  c.hidden = c.layers = c.heads = 0;
  if (!model.preset.empty()) {
    const GptPreset* found = nullptr;
    for (const auto& p : gpt_presets())
      if (model.preset == p.name) found = &p;
    PSTAR_CHECK(found != nullptr, ConfigError, "model.preset: unknown preset '", model.preset,
                "'; known presets: ", preset_names());
    c = GptConfig{found->hidden, found->layers, found->heads, found->vocab_size, found->seq_len};
  }
  if (model.hidden) c.hidden = *model.hidden;
  if (model.layers) c.layers = *model.layers;
  if (model.heads) c.heads = *model.heads;
  if (model.vocab_size) c.vocab_size = *model.vocab_size;
  if (model.seq_len) c.seq_len = *model.seq_len;
  const char* missing = c.hidden <= 0   ? "model.hidden"
                        : c.layers <= 0 ? "model.layers"
                        : c.heads <= 0  ? "model.heads"
                                        : nullptr;
  PSTAR_CHECK(missing == nullptr, ConfigError, missing,
              ": not set; give model.preset (one of: ", preset_names(),
              ") or all of model.hidden, model.layers and model.heads");
  PSTAR_CHECK(c.hidden % c.heads == 0, ConfigError, "model.hidden ", c.hidden,
              " is not divisible by model.heads ", c.heads, "; choose heads that divide hidden");
  return c;
}

std::vector<int64_t> gpt_leaf_module_numels(const GptConfig& c) {
  const int64_t h = c.hidden;
  std::vector<int64_t> numels = {c.vocab_size * h, c.seq_len * h};
  for (int64_t i = 0; i < c.layers; ++i) {
    for (int64_t n : {2 * h, 3 * h * h + 3 * h, h * h + h, 2 * h, 4 * h * h + 4 * h, 4 * h * h + h})
      numels.push_back(n);
  }
  numels.push_back(2 * h);
  return numels;
}

std::vector<GptParameterShape> gpt_parameter_shapes(const GptConfig& c) {
  const int64_t h = c.hidden;
  std::vector<GptParameterShape> params;
  int64_t leaf = 0;
  // A LayerNorm's or Conv1D's weight and bias; an embedding's weight alone.
  auto add_leaf = [&](const std::string& prefix, std::vector<int64_t> weight,
                      std::optional<int64_t> bias) {
    params.push_back({prefix + "weight", std::move(weight), leaf});
    if (bias) params.push_back({prefix + "bias", {*bias}, leaf});
    ++leaf;
  };
  add_leaf("transformer.wte.", {c.vocab_size, h}, std::nullopt);
  add_leaf("transformer.wpe.", {c.seq_len, h}, std::nullopt);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string block = "transformer.h." + std::to_string(i) + ".";
    add_leaf(block + "ln_1.", {h}, h);
    add_leaf(block + "attn.c_attn.", {h, 3 * h}, 3 * h);
    add_leaf(block + "attn.c_proj.", {h, h}, h);
    add_leaf(block + "ln_2.", {h}, h);
    add_leaf(block + "mlp.c_fc.", {h, 4 * h}, 4 * h);
    add_leaf(block + "mlp.c_proj.", {4 * h, h}, h);
  }
  add_leaf("transformer.ln_f.", {h}, h);
  return params;
}

}  // namespace pstar::model
