#include "pstar/model/llama_shape.h"

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"

namespace pstar::model {

int64_t LlamaConfig::num_params() const {
  const int64_t h = hidden;
  const int64_t attention = 2 * h * q_width() + 2 * h * kv_width() +
                            (qkv_bias ? q_width() + 2 * kv_width() : 0) + (o_bias ? h : 0);
  const int64_t mlp = 3 * h * intermediate + (mlp_bias ? 2 * intermediate + h : 0);
  const int64_t per_layer = attention + mlp + 2 * h;
  const int64_t embeddings = vocab_size * h * (tie_word_embeddings ? 1 : 2);
  return layers * per_layer + embeddings + h;
}

const std::vector<std::string>& llama_model_types() {
  static const std::vector<std::string> types = {"llama", "mistral", "qwen2"};
  return types;
}

namespace {

// Shapes as their Hugging Face config.json files publish them.
LlamaConfig shape(const char* type, int64_t hidden, int64_t intermediate, int64_t layers,
                  int64_t heads, int64_t kv_heads, int64_t vocab, int64_t max_positions,
                  double rope_theta, double eps, bool tied) {
  LlamaConfig c;
  c.model_type = type;
  c.hidden = hidden;
  c.intermediate = intermediate;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.vocab_size = vocab;
  c.max_positions = max_positions;
  c.seq_len = std::min<int64_t>(2048, max_positions);
  c.rope_theta = rope_theta;
  c.rms_norm_eps = eps;
  c.tie_word_embeddings = tied;
  c.qkv_bias = c.model_type == "qwen2";
  return c;
}

LlamaConfig with_llama3_rope(LlamaConfig c, double factor) {
  c.rope_scaling = RopeScaling{factor, 1.0, 4.0, 8192};
  return c;
}

std::vector<LlamaPreset> make_presets() {
  LlamaConfig tiny = shape("llama", 64, 176, 2, 4, 2, 256, 128, 500000.0, 1e-5, false);
  tiny.seq_len = 64;
  // Scaled so that the tiny model's wavelengths fall on both sides of the interpolated band.
  tiny.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 64};
  LlamaConfig mistral =
      shape("mistral", 4096, 14336, 32, 32, 8, 32000, 32768, 10000.0, 1e-5, false);
  mistral.sliding_window = 4096;
  return {
      {"llama-tiny", tiny},
      {"llama-3.2-1b",
       with_llama3_rope(shape("llama", 2048, 8192, 16, 32, 8, 128256, 131072, 500000.0, 1e-5, true),
                        32.0)},
      {"llama-3.2-3b",
       with_llama3_rope(shape("llama", 3072, 8192, 28, 24, 8, 128256, 131072, 500000.0, 1e-5, true),
                        32.0)},
      {"llama-3.1-8b",
       with_llama3_rope(
           shape("llama", 4096, 14336, 32, 32, 8, 128256, 131072, 500000.0, 1e-5, false), 8.0)},
      {"llama-2-13b", shape("llama", 5120, 13824, 40, 40, 40, 32000, 4096, 10000.0, 1e-5, false)},
      {"mistral-7b", mistral},
      {"qwen2.5-7b", shape("qwen2", 3584, 18944, 28, 28, 4, 152064, 131072, 1e6, 1e-6, false)},
      {"qwen2.5-14b", shape("qwen2", 5120, 13824, 48, 40, 8, 152064, 131072, 1e6, 1e-5, false)},
      {"llama-3.1-70b",
       with_llama3_rope(
           shape("llama", 8192, 28672, 80, 64, 8, 128256, 131072, 500000.0, 1e-5, false), 8.0)},
  };
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Reads the fields of one config.json, naming the file and key in every error.
class HfFields {
 public:
  HfFields(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      PSTAR_CHECK(fallback.has_value(), ConfigError, source_, ": missing \"", key,
                  "\"; a Hugging Face config.json of this family has it");
      return *fallback;
    }
    const auto& v = j_.at(key);
    PSTAR_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, ConfigError, source_, ": \"", key,
                "\" must be a positive integer, found ", v.dump());
    return v.get<int64_t>();
  }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_.at(key);
    PSTAR_CHECK(v.is_number() && v.get<double>() > 0, ConfigError, source_, ": \"", key,
                "\" must be a positive number, found ", v.dump());
    return v.get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_.at(key);
    PSTAR_CHECK(v.is_boolean(), ConfigError, source_, ": \"", key,
                "\" must be true or false, found ", v.dump());
    return v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_.at(key);
    PSTAR_CHECK(v.is_string(), ConfigError, source_, ": \"", key, "\" must be a string, found ",
                v.dump());
    return v.get<std::string>();
  }

 private:
  const nlohmann::json& j_;
  const std::string& source_;
};

std::optional<RopeScaling> read_rope_scaling(const nlohmann::json& j, const std::string& source) {
  if (!j.contains("rope_scaling") || j.at("rope_scaling").is_null()) return std::nullopt;
  const auto& r = j.at("rope_scaling");
  PSTAR_CHECK(r.is_object(), ConfigError, source, ": \"rope_scaling\" must be an object or null");
  // Newer files spell the kind rope_type, older ones type.
  const HfFields f(r, source);
  const std::string type = f.string("rope_type", f.string("type", ""));
  PSTAR_CHECK(type == "llama3" || type == "default", ConfigError, source, ": rope_scaling type \"",
              type,
              "\" is not supported; supported: \"llama3\" (Llama 3.1 and later) and \"default\"");
  if (type == "default") return std::nullopt;
  RopeScaling s;
  s.factor = f.number("factor", 0);
  PSTAR_CHECK(s.factor > 0, ConfigError, source, ": rope_scaling.factor is missing");
  s.low_freq_factor = f.number("low_freq_factor", 1.0);
  s.high_freq_factor = f.number("high_freq_factor", 4.0);
  PSTAR_CHECK(s.high_freq_factor > s.low_freq_factor, ConfigError, source,
              ": rope_scaling.high_freq_factor (", s.high_freq_factor,
              ") must exceed low_freq_factor (", s.low_freq_factor, ")");
  s.original_max_position_embeddings = f.integer("original_max_position_embeddings", 8192);
  return s;
}

}  // namespace

const std::vector<LlamaPreset>& llama_presets() {
  static const std::vector<LlamaPreset> presets = make_presets();
  return presets;
}

const LlamaConfig* find_llama_preset(const std::string& name) {
  for (const auto& p : llama_presets())
    if (name == p.name) return &p.config;
  return nullptr;
}

LlamaConfig llama_config_from_hf_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    PSTAR_THROW(ConfigError, source, ": not valid JSON (", e.what(), ")");
  }
  PSTAR_CHECK(j.is_object(), ConfigError, source, ": expected a JSON object");
  const HfFields f(j, source);
  LlamaConfig c;
  c.model_type = f.string("model_type", "");
  bool known = false;
  for (const auto& t : llama_model_types()) known = known || t == c.model_type;
  PSTAR_CHECK(known, ConfigError, source, ": model_type \"", c.model_type,
              "\" is not a Llama-family model; known: ", joined(llama_model_types()), ", gpt2");
  c.hidden = f.integer("hidden_size");
  c.intermediate = f.integer("intermediate_size");
  c.layers = f.integer("num_hidden_layers");
  c.heads = f.integer("num_attention_heads");
  c.kv_heads = f.integer("num_key_value_heads", c.heads);
  c.head_dim = f.integer("head_dim", c.hidden / c.heads);
  c.vocab_size = f.integer("vocab_size");
  c.max_positions = f.integer("max_position_embeddings", 2048);
  c.seq_len = std::min<int64_t>(2048, c.max_positions);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.rope_theta = f.number("rope_theta", 10000.0);
  c.rope_scaling = read_rope_scaling(j, source);
  const std::string act = f.string("hidden_act", "silu");
  PSTAR_CHECK(act == "silu", ConfigError, source, ": hidden_act \"", act,
              "\" is not supported; this family's models use \"silu\"");
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2's attention has q/k/v biases and none on o_proj, unconditionally
  } else {
    c.qkv_bias = c.o_bias = f.boolean("attention_bias", false);
  }
  c.mlp_bias = f.boolean("mlp_bias", false);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  // Qwen2 files carry a sliding_window that applies only with use_sliding_window.
  const bool sliding = c.model_type == "mistral" || f.boolean("use_sliding_window", false);
  if (sliding && f.has("sliding_window")) c.sliding_window = f.integer("sliding_window");
  validate_llama_config(c, source);
  return c;
}

std::string llama_config_to_hf_json(const LlamaConfig& c, const std::string& torch_dtype) {
  const char* architecture = c.model_type == "mistral" ? "MistralForCausalLM"
                             : c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                                       : "LlamaForCausalLM";
  nlohmann::json j = {
      {"architectures", {architecture}},
      {"model_type", c.model_type},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.intermediate},
      {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_positions},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", torch_dtype},
      {"initializer_range", 0.02},
      {"attention_dropout", 0.0},
  };
  if (c.model_type != "qwen2") j["attention_bias"] = c.qkv_bias;
  if (c.model_type == "llama") j["mlp_bias"] = c.mlp_bias;
  if (c.rope_scaling) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling->factor},
        {"low_freq_factor", c.rope_scaling->low_freq_factor},
        {"high_freq_factor", c.rope_scaling->high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.sliding_window) j["sliding_window"] = *c.sliding_window;
  if (c.model_type == "qwen2") j["use_sliding_window"] = false;
  return j.dump(2) + "\n";
}

void validate_llama_config(const LlamaConfig& c, const std::string& source) {
  const std::pair<const char*, int64_t> sizes[] = {{"hidden_size", c.hidden},
                                                   {"intermediate_size", c.intermediate},
                                                   {"num_hidden_layers", c.layers},
                                                   {"num_attention_heads", c.heads},
                                                   {"num_key_value_heads", c.kv_heads},
                                                   {"head_dim", c.head_dim},
                                                   {"vocab_size", c.vocab_size},
                                                   {"seq_len", c.seq_len},
                                                   {"max_position_embeddings", c.max_positions}};
  for (const auto& [key, value] : sizes)
    PSTAR_CHECK(value > 0, ConfigError, source, ": ", key, " must be positive, found ", value);
  PSTAR_CHECK(c.heads % c.kv_heads == 0, ConfigError, source, ": num_attention_heads (", c.heads,
              ") must be a multiple of num_key_value_heads (", c.kv_heads,
              "): each key/value head serves a whole group of query heads");
  PSTAR_CHECK(c.head_dim % 2 == 0, ConfigError, source, ": head_dim ", c.head_dim,
              " must be even: rotary embeddings rotate pairs of channels");
  PSTAR_CHECK(c.seq_len <= c.max_positions, ConfigError, source, ": seq_len ", c.seq_len,
              " exceeds max_position_embeddings ", c.max_positions,
              "; use a shorter model.seq_len");
  PSTAR_CHECK(!c.sliding_window || c.seq_len <= *c.sliding_window, ConfigError, source,
              ": seq_len ", c.seq_len, " exceeds sliding_window ", c.sliding_window.value_or(0),
              "; pstar has no sliding-window attention, so model.seq_len must be at most that");
}

std::vector<int64_t> llama_leaf_module_numels(const LlamaConfig& c) {
  // Counted directly rather than from llama_parameter_shapes: `pstar estimate` lays out thousands
  // of candidate shapes, and naming every parameter of each would dominate its time. The model
  // test checks both orders agree.
  const int64_t h = c.hidden, q = c.q_width(), kv = c.kv_width(), inter = c.intermediate;
  const int64_t qkv_bias = c.qkv_bias ? 1 : 0, mlp_bias = c.mlp_bias ? 1 : 0;
  std::vector<int64_t> numels;
  numels.reserve(static_cast<size_t>(9 * c.layers + 3));
  numels.push_back(c.vocab_size * h);
  for (int64_t i = 0; i < c.layers; ++i) {
    numels.push_back(h);
    numels.push_back((h + qkv_bias) * q);
    numels.push_back((h + qkv_bias) * kv);
    numels.push_back((h + qkv_bias) * kv);
    numels.push_back(q * h + (c.o_bias ? h : 0));
    numels.push_back(h);
    numels.push_back((h + mlp_bias) * inter);
    numels.push_back((h + mlp_bias) * inter);
    numels.push_back(inter * h + mlp_bias * h);
  }
  numels.push_back(h);
  if (!c.tie_word_embeddings) numels.push_back(c.vocab_size * h);
  return numels;
}

std::vector<ParameterShape> llama_parameter_shapes(const LlamaConfig& c) {
  const int64_t h = c.hidden;
  std::vector<ParameterShape> params;
  int64_t leaf = 0;
  auto add_leaf = [&](const std::string& prefix, std::vector<int64_t> weight, bool bias) {
    const int64_t rows = weight[0];
    params.push_back({prefix + "weight", std::move(weight), leaf});
    if (bias) params.push_back({prefix + "bias", {rows}, leaf});
    ++leaf;
  };
  add_leaf("model.embed_tokens.", {c.vocab_size, h}, false);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    add_leaf(layer + "input_layernorm.", {h}, false);
    add_leaf(layer + "self_attn.q_proj.", {c.q_width(), h}, c.qkv_bias);
    add_leaf(layer + "self_attn.k_proj.", {c.kv_width(), h}, c.qkv_bias);
    add_leaf(layer + "self_attn.v_proj.", {c.kv_width(), h}, c.qkv_bias);
    add_leaf(layer + "self_attn.o_proj.", {h, c.q_width()}, c.o_bias);
    add_leaf(layer + "post_attention_layernorm.", {h}, false);
    add_leaf(layer + "mlp.gate_proj.", {c.intermediate, h}, c.mlp_bias);
    add_leaf(layer + "mlp.up_proj.", {c.intermediate, h}, c.mlp_bias);
    add_leaf(layer + "mlp.down_proj.", {h, c.intermediate}, c.mlp_bias);
  }
  add_leaf("model.norm.", {h}, false);
  if (!c.tie_word_embeddings) add_leaf("lm_head.", {c.vocab_size, h}, false);
  return params;
}

}  // namespace pstar::model
