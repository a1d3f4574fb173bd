// The table of decoder families (Note [families as data] in pstar/model/family.h), and what a
// DecoderConfig computes from its fields alone.
#include "pstar/model/family.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"

namespace pstar::model {

const char* mlp_activation_name(MlpActivation a) {
  switch (a) {
    case MlpActivation::kSilu:
      return "silu";
    case MlpActivation::kGeluTanh:
      return "gelu_pytorch_tanh";
  }
  return "?";
}

std::optional<MlpActivation> parse_mlp_activation(const std::string& name) {
  // Hugging Face's ACT2FN: "swish" is "silu" under another name.
  if (name == "silu" || name == "swish") return MlpActivation::kSilu;
  if (name == "gelu_pytorch_tanh") return MlpActivation::kGeluTanh;
  return std::nullopt;
}

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kFull:
      return "full_attention";
    case LayerKind::kSliding:
      return "sliding_attention";
  }
  return "?";
}

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
  }
  return "?";
}

bool RopeConfig::operator==(const RopeConfig& o) const {
  if (theta != o.theta || type != o.type) return false;
  switch (type) {
    case RopeType::kDefault:
      return true;
    case RopeType::kLinear:
      return factor == o.factor;
    case RopeType::kLlama3:
      return factor == o.factor && low_freq_factor == o.low_freq_factor &&
             high_freq_factor == o.high_freq_factor &&
             original_max_position_embeddings == o.original_max_position_embeddings;
  }
  return false;
}

namespace {

// Mixtral's experts are w1 (gate), w3 (up) and w2 (down) under block_sparse_moe; Qwen3-MoE's are
// named as a dense MLP's, under mlp.
const MoeSpelling kMixtralMoe = {
    "block_sparse_moe", "num_local_experts", "intermediate_size", "w1", "w3", "w2", false, false};
const MoeSpelling kQwen3Moe = {
    "mlp", "num_experts", "moe_intermediate_size", "gate_proj", "up_proj", "down_proj", true, true};

std::vector<DecoderFamily> make_families() {
  using N = NormKind;
  using B = AttentionBias;
  using S = SlidingRule;
  // clang-format off
  //  model_type, architecture, description,
  //  norm, sandwich norms, q/k norm, embedding scale,
  //  activation key, attention bias, mlp_bias key, sliding rule, local rope, query scalar,
  //  Hugging Face's defaults, fused projections, wrapper model_type, mixture of experts
  return {
      {"llama", "LlamaForCausalLM", "Llama 2/3 (LlamaForCausalLM)",
       N::kWeight, false, false, false,
       "hidden_act", B::kFromKey, true, S::kNever, false, false,
       R"({"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": false})",
       false, nullptr, nullptr},
      {"mistral", "MistralForCausalLM", "Mistral (MistralForCausalLM)",
       N::kWeight, false, false, false,
       "hidden_act", B::kFromKey, false, S::kAllLayers, false, false,
       R"({"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": false})",
       false, nullptr, nullptr},
      {"qwen2", "Qwen2ForCausalLM", "Qwen2, Qwen2.5 (Qwen2ForCausalLM)",
       N::kWeight, false, false, false,
       "hidden_act", B::kQkvAlways, false, S::kFromMaxWindow, false, false,
       R"({"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
           "use_sliding_window": false, "max_window_layers": 28})",
       false, nullptr, nullptr},
      {"qwen3", "Qwen3ForCausalLM", "Qwen3 (Qwen3ForCausalLM)",
       N::kWeight, false, true, false,
       "hidden_act", B::kFromKey, false, S::kFromMaxWindow, false, false,
       R"({"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
           "use_sliding_window": false, "max_window_layers": 28})",
       false, nullptr, nullptr},
      {"gemma3_text", "Gemma3ForCausalLM",
       "Gemma 3 (Gemma3ForCausalLM, and the language model of Gemma3ForConditionalGeneration)",
       N::kOnePlusWeight, true, true, true,
       "hidden_activation", B::kFromKey, false, S::kPattern, true, true,
       R"({"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
           "tie_word_embeddings": true, "num_attention_heads": 8, "num_key_value_heads": 4,
           "head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072,
           "query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_pattern": 6,
           "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "pad_token_id": 0})",
       false, "gemma3", nullptr},
      {"phi3", "Phi3ForCausalLM", "Phi-3, Phi-4 (Phi3ForCausalLM)",
       N::kWeight, false, false, false,
       "hidden_act", B::kNever, false, S::kAllLayers, false, false,
       R"({"hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": false})",
       true, nullptr, nullptr},
      {"mixtral", "MixtralForCausalLM", "Mixtral (MixtralForCausalLM)",
       N::kWeight, false, false, false,
       "hidden_act", B::kFromKey, false, S::kAllLayers, false, false,
       R"({"hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
           "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.001,
           "output_router_logits": false})",
       false, nullptr, &kMixtralMoe},
      {"qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3-MoE (Qwen3MoeForCausalLM)",
       N::kWeight, false, true, false,
       "hidden_act", B::kFromKey, false, S::kFromMaxWindow, false, false,
       R"({"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
           "use_sliding_window": false, "max_window_layers": 28, "num_experts": 128,
           "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": false,
           "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.001,
           "output_router_logits": false})",
       false, nullptr, &kQwen3Moe},
  };
  // clang-format on
}

const nlohmann::json& defaults_of(const DecoderFamily& f) {
  // Parsed once per row; the table is static, so are these.
  static const std::vector<nlohmann::json> parsed = [] {
    std::vector<nlohmann::json> out;
    for (const auto& row : decoder_families())
      out.push_back(nlohmann::json::parse(row.hf_defaults));
    return out;
  }();
  return parsed[static_cast<size_t>(&f - decoder_families().data())];
}

}  // namespace

const std::vector<DecoderFamily>& decoder_families() {
  static const std::vector<DecoderFamily> families = make_families();
  return families;
}

const DecoderFamily* find_decoder_family(const std::string& model_type) {
  for (const auto& f : decoder_families())
    if (model_type == f.model_type ||
        (f.wrapper_model_type != nullptr && model_type == f.wrapper_model_type))
      return &f;
  return nullptr;
}

const DecoderFamily& llama_family() { return decoder_families().front(); }

std::string decoder_family_names() {
  std::string out;
  for (const auto& f : decoder_families()) {
    out += (out.empty() ? "" : ", ") + std::string(f.model_type);
    if (f.wrapper_model_type != nullptr) out += std::string(", ") + f.wrapper_model_type;
  }
  return out;
}

int64_t default_sliding_pattern(const DecoderFamily& f) {
  const nlohmann::json& d = defaults_of(f);
  return d.contains("sliding_window_pattern") ? d.at("sliding_window_pattern").get<int64_t>() : 0;
}

DecoderConfig family_defaults(const DecoderFamily& f) {
  const nlohmann::json& d = defaults_of(f);
  DecoderConfig c;
  c.family = &f;
  c.norms.kind = f.norm;
  c.norms.sandwich = f.sandwich_norms;
  c.norms.qk = f.qk_norm;
  c.embed_scale = f.embed_scale;
  const std::string activation = d.at(f.activation_key).get<std::string>();
  PSTAR_INTERNAL_ASSERT(parse_mlp_activation(activation).has_value(), "the ", f.model_type,
                        " row's default activation ", activation);
  c.activation = *parse_mlp_activation(activation);
  c.norms.eps = d.at("rms_norm_eps").get<double>();
  c.tie_word_embeddings = d.at("tie_word_embeddings").get<bool>();
  if (d.contains("pad_token_id")) c.pad_token_id = d.at("pad_token_id").get<int64_t>();
  if (f.moe != nullptr) {
    MoeConfig m;
    m.experts = d.at(f.moe->experts_key).get<int64_t>();
    m.top_k = d.at("num_experts_per_tok").get<int64_t>();
    // Mixtral's experts are as wide as its intermediate_size, which is the shape's.
    if (d.contains(f.moe->width_key)) m.expert_intermediate = d.at(f.moe->width_key).get<int64_t>();
    m.normalize_top_k = !f.moe->normalize_key || d.at("norm_topk_prob").get<bool>();
    m.aux_loss_coef = d.at("router_aux_loss_coef").get<double>();
    m.aux_loss = d.at("output_router_logits").get<bool>();
    if (f.moe->sparse_layer_keys) {
      m.sparse_step = d.at("decoder_sparse_step").get<int64_t>();
      m.dense_layers = d.at("mlp_only_layers").get<std::vector<int64_t>>();
    }
    c.moe = m;
  }
  return c;
}

std::vector<LayerKind> family_layer_kinds(const DecoderFamily& f, int64_t layers, bool sliding,
                                          int64_t first_sliding, int64_t pattern) {
  std::vector<LayerKind> kinds(static_cast<size_t>(std::max<int64_t>(layers, 0)), LayerKind::kFull);
  if (!sliding) return kinds;
  for (int64_t i = 0; i < layers; ++i) {
    bool slides = false;
    switch (f.sliding) {
      case SlidingRule::kNever:
        break;
      case SlidingRule::kAllLayers:
        slides = true;
        break;
      case SlidingRule::kFromMaxWindow:
        slides = i >= first_sliding;
        break;
      case SlidingRule::kPattern:
        slides = pattern > 0 && (i + 1) % pattern != 0;
        break;
    }
    kinds[static_cast<size_t>(i)] = slides ? LayerKind::kSliding : LayerKind::kFull;
  }
  return kinds;
}

DecoderConfig::DecoderConfig() : family(&llama_family()) {}

const char* DecoderConfig::model_type() const { return family->model_type; }

bool DecoderConfig::has_sliding_layers() const {
  const auto& kinds = attention.layer_kinds;
  return std::find(kinds.begin(), kinds.end(), LayerKind::kSliding) != kinds.end();
}

double DecoderConfig::query_scale() const {
  const double scalar = attention.query_pre_attn_scalar > 0 ? attention.query_pre_attn_scalar
                                                            : static_cast<double>(head_dim);
  return 1.0 / std::sqrt(scalar);
}

bool MoeConfig::sparse(int64_t layer) const {
  if (std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end())
    return false;
  return experts > 0 && sparse_step > 0 && (layer + 1) % sparse_step == 0;
}

bool MoeConfig::operator==(const MoeConfig& o) const {
  return experts == o.experts && top_k == o.top_k && expert_intermediate == o.expert_intermediate &&
         normalize_top_k == o.normalize_top_k && aux_loss_coef == o.aux_loss_coef &&
         aux_loss == o.aux_loss && sparse_step == o.sparse_step && dense_layers == o.dense_layers;
}

namespace {

// One layer's MLP parameters: a dense gated MLP, or the router and `experts` of them.
int64_t mlp_params(const DecoderConfig& c, int64_t layer, int64_t experts) {
  const int64_t bias = c.bias.mlp ? 1 : 0;
  if (!c.sparse_layer(layer))
    return 3 * c.hidden * c.intermediate + bias * (2 * c.intermediate + c.hidden);
  const int64_t expert = 3 * c.hidden * c.moe->expert_intermediate;
  return c.moe->experts * c.hidden + experts * expert;
}

}  // namespace

int64_t DecoderConfig::active_params() const {
  int64_t total = num_params();
  if (!moe) return total;
  for (int64_t l = 0; l < layers; ++l)
    total += mlp_params(*this, l, moe->top_k) - mlp_params(*this, l, moe->experts);
  return total;
}

int64_t DecoderConfig::num_params() const {
  const int64_t h = hidden;
  const int64_t attention = 2 * h * q_width() + 2 * h * kv_width() +
                            (bias.qkv ? q_width() + 2 * kv_width() : 0) + (bias.o ? h : 0) +
                            (norms.qk ? 2 * head_dim : 0);
  int64_t mlps = 0;
  for (int64_t l = 0; l < layers; ++l) mlps += mlp_params(*this, l, moe ? moe->experts : 0);
  const int64_t per_layer = attention + norms_per_block() * h;
  const int64_t embeddings = vocab_size * h * (tie_word_embeddings ? 1 : 2);
  return layers * per_layer + mlps + embeddings + h;
}

}  // namespace pstar::model
