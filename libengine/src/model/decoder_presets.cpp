// The published decoder shapes (docs/models.md#presets), as their Hugging Face config.json files
// give them; tests check each count against the one its own config.json's shapes give.
#include <algorithm>

#include "pstar/model/decoder_shape.h"
#include "pstar/model/family.h"

namespace pstar::model {
namespace {

struct Shape {
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, max_positions;
  double rope_theta, eps;
  bool tied;
};

DecoderConfig make(const char* model_type, const Shape& s) {
  DecoderConfig c = family_defaults(*find_decoder_family(model_type));
  c.hidden = s.hidden;
  c.intermediate = s.intermediate;
  c.layers = s.layers;
  c.heads = s.heads;
  c.kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.vocab_size = s.vocab;
  c.max_positions = s.max_positions;
  c.seq_len = std::min<int64_t>(2048, s.max_positions);
  c.norms.eps = s.eps;
  c.tie_word_embeddings = s.tied;
  c.bias.qkv = c.family->attention_bias == AttentionBias::kQkvAlways;
  c.attention.rope[0].theta = c.attention.rope[1].theta = s.rope_theta;
  c.attention.layer_kinds = family_layer_kinds(*c.family, c.layers, false, 0, 0);
  return c;
}

DecoderConfig with_llama3_rope(DecoderConfig c, double factor, int64_t original = 8192) {
  for (RopeConfig& r : c.attention.rope) {
    r.type = RopeType::kLlama3;
    r.factor = factor;
    r.low_freq_factor = 1;
    r.high_freq_factor = 4;
    r.original_max_position_embeddings = original;
  }
  return c;
}

// Every layer sliding with `window` (Mistral's rule).
DecoderConfig with_window(DecoderConfig c, int64_t window) {
  c.attention.sliding_window = window;
  c.attention.layer_kinds = family_layer_kinds(*c.family, c.layers, true, 0, 0);
  return c;
}

// Gemma 3: five sliding layers to one global, local layers rotating by 10000, the global ones by
// rope_theta with linear scaling `factor` (1: none), queries scaled by query_pre_attn_scalar.
DecoderConfig gemma3(const Shape& s, int64_t window, double query_scalar, double factor) {
  DecoderConfig c = make("gemma3_text", s);
  c.attention.sliding_window = window;
  c.attention.layer_kinds =
      family_layer_kinds(*c.family, c.layers, true, 0, default_sliding_pattern(*c.family));
  c.attention.query_pre_attn_scalar = query_scalar;
  c.attention.rope[static_cast<size_t>(LayerKind::kSliding)].theta = 10000.0;
  if (factor != 1) {
    RopeConfig& global = c.attention.rope[static_cast<size_t>(LayerKind::kFull)];
    global.type = RopeType::kLinear;
    global.factor = factor;
  }
  return c;
}

// A mixture of experts: `experts` of width `width`, the top `top_k` of them, renormalised or not.
DecoderConfig with_experts(DecoderConfig c, int64_t experts, int64_t top_k, int64_t width,
                           bool normalize, double aux_coef) {
  MoeConfig& m = *c.moe;
  m.experts = experts;
  m.top_k = top_k;
  m.expert_intermediate = width;
  m.normalize_top_k = normalize;
  m.aux_loss_coef = aux_coef;
  return c;
}

DecoderConfig with_pad(DecoderConfig c, int64_t pad_token_id) {
  c.pad_token_id = pad_token_id;
  return c;
}

// 8 experts of width 32 (top 2, renormalised) on hidden 64, layer 0 dense.
DecoderConfig qwen3_moe_tiny() {
  DecoderConfig c = with_experts(
      make("qwen3_moe", {64, 128, 3, 4, 2, 16, 256, 128, 1e6, 1e-6, false}), 8, 2, 32, true, 0.001);
  c.moe->dense_layers = {0};
  c.seq_len = 64;
  return c;
}

std::vector<DecoderPreset> make_presets() {
  DecoderConfig tiny = with_llama3_rope(
      make("llama", {64, 176, 2, 4, 2, 16, 256, 128, 500000.0, 1e-5, false}), 8.0, 64);
  tiny.seq_len = 64;  // scaled so that the wavelengths fall on both sides of the llama3 band
  const int64_t qwen3_vocab = 151936, gemma3_vocab = 262208;
  return {
      {"llama-tiny", tiny},
      {"llama-3.2-1b",
       with_llama3_rope(make("llama", {2048, 8192, 16, 32, 8, 64, 128256, 131072, 5e5, 1e-5, true}),
                        32.0)},
      {"llama-3.2-3b",
       with_llama3_rope(
           make("llama", {3072, 8192, 28, 24, 8, 128, 128256, 131072, 5e5, 1e-5, true}), 32.0)},
      {"llama-3.1-8b",
       with_llama3_rope(
           make("llama", {4096, 14336, 32, 32, 8, 128, 128256, 131072, 5e5, 1e-5, false}), 8.0)},
      {"llama-2-13b", make("llama", {5120, 13824, 40, 40, 40, 128, 32000, 4096, 1e4, 1e-5, false})},
      {"mistral-7b",
       with_window(make("mistral", {4096, 14336, 32, 32, 8, 128, 32000, 32768, 1e4, 1e-5, false}),
                   4096)},
      {"qwen2.5-7b",
       make("qwen2", {3584, 18944, 28, 28, 4, 128, 152064, 131072, 1e6, 1e-6, false})},
      {"qwen2.5-14b",
       make("qwen2", {5120, 13824, 48, 40, 8, 128, 152064, 131072, 1e6, 1e-5, false})},
      {"llama-3.1-70b",
       with_llama3_rope(
           make("llama", {8192, 28672, 80, 64, 8, 128, 128256, 131072, 5e5, 1e-5, false}), 8.0)},
      {"qwen3-0.6b",
       make("qwen3", {1024, 3072, 28, 16, 8, 128, qwen3_vocab, 40960, 1e6, 1e-6, true})},
      {"qwen3-1.7b",
       make("qwen3", {2048, 6144, 28, 16, 8, 128, qwen3_vocab, 40960, 1e6, 1e-6, true})},
      {"qwen3-4b",
       make("qwen3", {2560, 9728, 36, 32, 8, 128, qwen3_vocab, 40960, 1e6, 1e-6, true})},
      {"qwen3-8b",
       make("qwen3", {4096, 12288, 36, 32, 8, 128, qwen3_vocab, 40960, 1e6, 1e-6, false})},
      {"qwen3-14b",
       make("qwen3", {5120, 17408, 40, 40, 8, 128, qwen3_vocab, 40960, 1e6, 1e-6, false})},
      {"qwen3-32b",
       make("qwen3", {5120, 25600, 64, 64, 8, 128, qwen3_vocab, 40960, 1e6, 1e-6, false})},
      {"gemma-3-1b",
       gemma3({1152, 6912, 26, 4, 1, 256, 262144, 32768, 1e6, 1e-6, true}, 512, 256, 1.0)},
      {"gemma-3-4b",
       gemma3({2560, 10240, 34, 8, 4, 256, gemma3_vocab, 131072, 1e6, 1e-6, true}, 1024, 256, 8.0)},
      {"gemma-3-12b", gemma3({3840, 15360, 48, 16, 8, 256, gemma3_vocab, 131072, 1e6, 1e-6, true},
                             1024, 256, 8.0)},
      {"gemma-3-27b", gemma3({5376, 21504, 62, 32, 16, 128, gemma3_vocab, 131072, 1e6, 1e-6, true},
                             1024, 168, 8.0)},
      {"phi-4",
       with_pad(make("phi3", {5120, 17920, 40, 40, 10, 128, 100352, 16384, 250000.0, 1e-5, false}),
                100257)},
      {"mixtral-8x7b",
       with_experts(make("mixtral", {4096, 14336, 32, 32, 8, 128, 32000, 32768, 1e6, 1e-5, false}),
                    8, 2, 14336, true, 0.02)},
      {"qwen3-30b-a3b", with_experts(make("qwen3_moe", {2048, 6144, 48, 32, 4, 128, qwen3_vocab,
                                                        40960, 1e6, 1e-6, false}),
                                     128, 8, 768, true, 0.001)},
      {"qwen3-moe-tiny", qwen3_moe_tiny()},
  };
}

}  // namespace

const std::vector<DecoderPreset>& decoder_presets() {
  static const std::vector<DecoderPreset> presets = make_presets();
  return presets;
}

const DecoderConfig* find_decoder_preset(const std::string& name) {
  for (const auto& p : decoder_presets())
    if (name == p.name) return &p.config;
  return nullptr;
}

std::string decoder_preset_names() {
  std::string names;
  for (const auto& p : decoder_presets())
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

}  // namespace pstar::model
