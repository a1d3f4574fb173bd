// A decoder's config.json in and out, through its family's row (pstar/model/hf_decoder_config.h).
#include "pstar/model/hf_decoder_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/family.h"

namespace pstar::model {
namespace {

using nlohmann::json;

// The fields of one config.json object, each read from the file or else from the family's
// Hugging Face defaults, naming the file and the key in every error.
class HfFields {
 public:
  HfFields(const json& file, const json& defaults, std::string source)
      : file_(file), defaults_(defaults), source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  bool in_file(const char* key) const { return file_.contains(key) && !file_.at(key).is_null(); }
  bool has(const char* key) const { return !value(key).is_null(); }
  // The value, from the file or else the defaults; null when neither has it, or when the file
  // says null (as in the config classes, an explicit null is None, not the default).
  json value(const char* key) const {
    if (file_.contains(key)) return file_.at(key);
    return defaults_.contains(key) ? defaults_.at(key) : json();
  }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const json v = value(key);
    if (v.is_null()) {
      PSTAR_CHECK(fallback.has_value(), ConfigError, source_, ": missing \"", key,
                  "\"; a Hugging Face config.json of this family has it");
      return *fallback;
    }
    PSTAR_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, ConfigError, source_, ": \"", key,
                "\" must be a positive integer, found ", v.dump());
    return v.get<int64_t>();
  }

  double number(const char* key, double fallback) const {
    const json v = value(key);
    if (v.is_null()) return fallback;
    PSTAR_CHECK(v.is_number() && v.get<double>() > 0, ConfigError, source_, ": \"", key,
                "\" must be a positive number, found ", v.dump());
    return v.get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    const json v = value(key);
    if (v.is_null()) return fallback;
    PSTAR_CHECK(v.is_boolean(), ConfigError, source_, ": \"", key,
                "\" must be true or false, found ", v.dump());
    return v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    const json v = value(key);
    if (v.is_null()) return fallback;
    PSTAR_CHECK(v.is_string(), ConfigError, source_, ": \"", key, "\" must be a string, found ",
                v.dump());
    return v.get<std::string>();
  }

 private:
  const json& file_;
  const json& defaults_;
  std::string source_;
};

// Note [rope in config.json]
// transformers 4 writes a decoder's rotary embedding as top-level rope_theta and rope_scaling
// (null, or {"rope_type" (older files: "type"), "factor", ...}), Gemma 3 adds rope_local_base_freq
// for its sliding layers; transformers 5 writes rope_parameters instead: one object {"rope_theta",
// "rope_type", "factor", ...} for every layer, or, for families with several layer types, one such
// object per type ({"full_attention": {...}, "sliding_attention": {...}}), and no top-level
// rope_theta. Both are read here; where a file has both spellings they must agree. A file with
// neither is a ConfigError naming both keys, never a default (pstar once took 10000 there: a
// different model with no error), except where the family's Hugging Face class supplies it
// (DecoderFamily::hf_defaults: Gemma 3's text_config). What is not implemented is refused by name:
// a rope type other than default, linear and llama3 (LongRoPE and su, yarn, dynamic), and a
// partial_rotary_factor below 1.
RopeConfig read_rope_object(const json& r, const std::string& where, std::optional<double> theta) {
  PSTAR_CHECK(r.is_object(), ConfigError, where, " must be an object, found ", r.dump());
  const json no_defaults = json::object();
  const HfFields f(r, no_defaults, where);
  RopeConfig out;
  if (f.has("rope_theta")) theta = f.number("rope_theta", 0);
  PSTAR_CHECK(theta.has_value(), ConfigError, where, " has no \"rope_theta\"");
  out.theta = *theta;
  const std::string type = f.string("rope_type", f.string("type", "default"));
  PSTAR_CHECK(f.number("partial_rotary_factor", 1.0) == 1.0, ConfigError, where,
              ": partial_rotary_factor ", f.value("partial_rotary_factor").dump(),
              " is not supported; pstar rotates every channel of a head (1.0)");
  if (type == "default") return out;
  if (type == "linear") {
    out.type = RopeType::kLinear;
  } else if (type == "llama3") {
    out.type = RopeType::kLlama3;
    out.low_freq_factor = f.number("low_freq_factor", 1.0);
    out.high_freq_factor = f.number("high_freq_factor", 4.0);
    out.original_max_position_embeddings = f.integer("original_max_position_embeddings", 8192);
  } else {
    PSTAR_THROW(ConfigError, where, ": rope type \"", type,
                "\" is not supported; supported: \"default\", \"linear\" and \"llama3\" (not "
                "LongRoPE/su, yarn or dynamic)");
  }
  out.factor = f.number("factor", 0);
  PSTAR_CHECK(out.factor > 0, ConfigError, where, ": the ", type, " rope needs a positive factor");
  return out;
}

void read_rope(const json& j, const HfFields& f, const DecoderFamily& family, DecoderConfig& c) {
  const std::string& source = f.source();
  const bool v4 = f.in_file("rope_theta");
  const bool v5 = f.in_file("rope_parameters");
  std::array<std::optional<RopeConfig>, kLayerKinds> from_v5;
  if (v5) {
    const json& p = j.at("rope_parameters");
    PSTAR_CHECK(p.is_object(), ConfigError, source, ": \"rope_parameters\" must be an object");
    bool keyed = false;
    for (int k = 0; k < kLayerKinds; ++k) {
      const char* kind = layer_kind_name(static_cast<LayerKind>(k));
      if (p.contains(kind)) {
        keyed = true;
        from_v5[static_cast<size_t>(k)] =
            read_rope_object(p.at(kind), source + ": rope_parameters." + kind, std::nullopt);
      }
    }
    if (!keyed) {
      const RopeConfig one = read_rope_object(p, source + ": rope_parameters", std::nullopt);
      from_v5 = {one, one};
    }
  }
  std::array<std::optional<RopeConfig>, kLayerKinds> from_v4;
  if (v4 || (!v5 && f.has("rope_theta"))) {
    const double theta = f.number("rope_theta", 0);
    RopeConfig global{theta};
    if (f.in_file("rope_scaling"))
      global = read_rope_object(j.at("rope_scaling"), source + ": rope_scaling", theta);
    from_v4[0] = global;
    from_v4[1] = global;
    if (family.local_rope) from_v4[1] = RopeConfig{f.number("rope_local_base_freq", 0)};
  }
  PSTAR_CHECK(v5 || from_v4[0].has_value(), ConfigError, source,
              ": no rotary embedding: neither \"rope_theta\" (transformers 4) nor "
              "\"rope_parameters\" (transformers 5) is given; pstar takes no default for it");
  for (size_t k = 0; k < static_cast<size_t>(kLayerKinds); ++k) {
    const char* kind = layer_kind_name(static_cast<LayerKind>(k));
    if (from_v5[k] && from_v4[k] && v4) {
      PSTAR_CHECK(*from_v5[k] == *from_v4[k], ConfigError, source, ": rope_parameters and ",
                  "rope_theta/rope_scaling disagree for ", kind, " layers (theta ",
                  from_v5[k]->theta, " against ", from_v4[k]->theta,
                  "); keep one of the two spellings");
    }
    const std::optional<RopeConfig>& chosen = from_v5[k] ? from_v5[k] : from_v4[k];
    // A keyed rope_parameters without an entry for a kind no layer has is fine.
    const bool used = std::find(c.attention.layer_kinds.begin(), c.attention.layer_kinds.end(),
                                static_cast<LayerKind>(k)) != c.attention.layer_kinds.end();
    PSTAR_CHECK(chosen.has_value() || !used, ConfigError, source, ": rope_parameters has no \"",
                kind, "\" entry, which the ", kind, " layers need");
    c.attention.rope[k] = chosen ? *chosen : (from_v5[0] ? *from_v5[0] : *from_v5[1]);
  }
  PSTAR_CHECK(family.local_rope || c.attention.rope[0] == c.attention.rope[1], ConfigError, source,
              ": rope_parameters gives full_attention and sliding_attention layers different "
              "rotary embeddings, which ",
              family.model_type, " models do not have");
}

// Which layers slide: layer_types where the file lists them, else the family's rule.
void read_layer_kinds(const HfFields& f, const DecoderFamily& family, DecoderConfig& c) {
  const std::string& source = f.source();
  if (f.in_file("layer_types")) {
    const json types = f.value("layer_types");
    PSTAR_CHECK(types.is_array(), ConfigError, source, ": \"layer_types\" must be a list");
    for (const auto& t : types) {
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name == layer_kind_name(LayerKind::kFull)) {
        c.attention.layer_kinds.push_back(LayerKind::kFull);
      } else if (name == layer_kind_name(LayerKind::kSliding)) {
        c.attention.layer_kinds.push_back(LayerKind::kSliding);
      } else {
        PSTAR_THROW(ConfigError, source, ": layer_types entry \"", name,
                    "\" is not supported; supported: \"full_attention\", \"sliding_attention\"");
      }
    }
  } else {
    bool sliding = false;
    int64_t first = 0;
    switch (family.sliding) {
      case SlidingRule::kNever:
        break;
      case SlidingRule::kAllLayers:
        sliding = f.in_file("sliding_window");
        break;
      case SlidingRule::kFromMaxWindow:
        sliding = f.boolean("use_sliding_window", false) && f.in_file("sliding_window");
        first = f.integer("max_window_layers", c.layers);
        break;
      case SlidingRule::kPattern:
        sliding = true;
        break;
    }
    const int64_t pattern =
        family.sliding == SlidingRule::kPattern ? f.integer("sliding_window_pattern") : 0;
    c.attention.layer_kinds = family_layer_kinds(family, c.layers, sliding, first, pattern);
  }
  if (c.has_sliding_layers()) c.attention.sliding_window = f.integer("sliding_window");
}

// Features of config.json pstar does not compute: each a ConfigError naming the key and value.
void refuse_unsupported(const HfFields& f) {
  const std::string& source = f.source();
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    PSTAR_CHECK(!f.in_file(key), ConfigError, source, ": ", key, " ", f.value(key).dump(),
                " is not supported; pstar computes logits without softcapping (null)");
  PSTAR_CHECK(!f.boolean("use_bidirectional_attention", false), ConfigError, source,
              ": use_bidirectional_attention true is not supported; pstar trains causal "
              "decoders (false)");
  PSTAR_CHECK(f.number("partial_rotary_factor", 1.0) == 1.0, ConfigError, source,
              ": partial_rotary_factor ", f.value("partial_rotary_factor").dump(),
              " is not supported; pstar rotates every channel of a head (1.0)");
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"}) {
    const json v = f.value(key);
    PSTAR_CHECK(v.is_null() || (v.is_number() && v.get<double>() == 0.0), ConfigError, source, ": ",
                key, " ", v.dump(), " is not supported; pstar trains without dropout (0.0)");
  }
}

// A mixture-of-experts family's block (MoeConfig): its keys through the row's spelling, and what
// pstar does not route refused by name.
void read_moe(const HfFields& f, const DecoderFamily& family, DecoderConfig& c) {
  const std::string& source = f.source();
  const MoeSpelling& m = *family.moe;
  MoeConfig moe;
  moe.experts = f.integer(m.experts_key);
  moe.top_k = f.integer("num_experts_per_tok");
  PSTAR_CHECK(moe.top_k <= moe.experts, ConfigError, source, ": num_experts_per_tok ", moe.top_k,
              " exceeds ", m.experts_key, " ", moe.experts);
  moe.expert_intermediate = f.integer(m.width_key);
  moe.normalize_top_k = !m.normalize_key || f.boolean("norm_topk_prob", false);
  const json coef = f.value("router_aux_loss_coef");
  PSTAR_CHECK(coef.is_null() || (coef.is_number() && coef.get<double>() >= 0), ConfigError, source,
              ": \"router_aux_loss_coef\" must be a number at least 0, found ", coef.dump());
  moe.aux_loss_coef = coef.is_null() ? 0.0 : coef.get<double>();
  moe.aux_loss = f.boolean("output_router_logits", false);
  if (m.sparse_layer_keys) {
    moe.sparse_step = f.integer("decoder_sparse_step", 1);
    const json dense = f.value("mlp_only_layers");
    PSTAR_CHECK(dense.is_null() || dense.is_array(), ConfigError, source,
                ": \"mlp_only_layers\" must be a list of layer indices, found ", dense.dump());
    for (const auto& l : dense.is_null() ? json::array() : dense) {
      PSTAR_CHECK(l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < c.layers,
                  ConfigError, source, ": mlp_only_layers entry ", l.dump(),
                  " is not a layer index below num_hidden_layers ", c.layers);
      moe.dense_layers.push_back(l.get<int64_t>());
    }
  }
  // Routing pstar does not implement: each would train another model than the file's.
  const auto positive = [&](const char* key) {
    const json v = f.value(key);
    return v.is_number() && v.get<double>() > 0;
  };
  for (const char* key :
       {"shared_expert_intermediate_size", "n_shared_experts", "router_jitter_noise",
        "capacity_factor", "moe_capacity_factor", "expert_capacity"})
    PSTAR_CHECK(!positive(key), ConfigError, source, ": ", key, " ", f.value(key).dump(),
                " is not supported; pstar routes every token to its top num_experts_per_tok "
                "experts by softmax, with no shared experts, no jitter and no capacity limit");
  for (const auto& [key, supported] :
       {std::pair<const char*, const char*>{"scoring_func", "softmax"},
        {"topk_method", "greedy"}}) {
    const std::string value = f.string(key, supported);
    PSTAR_CHECK(value == supported, ConfigError, source, ": ", key, " \"", value,
                "\" is not supported; supported: \"", supported, "\"");
  }
  c.moe = moe;
}

json parse_object(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    PSTAR_THROW(ConfigError, source, ": not valid JSON (", e.what(), ")");
  }
  PSTAR_CHECK(j.is_object(), ConfigError, source, ": expected a JSON object");
  return j;
}

}  // namespace

DecoderConfig decoder_config_from_hf_json(const std::string& text, const std::string& source) {
  const json top = parse_object(text, source);
  const std::string model_type = top.contains("model_type") && top.at("model_type").is_string()
                                     ? top.at("model_type").get<std::string>()
                                     : std::string();
  const DecoderFamily* family = find_decoder_family(model_type);
  PSTAR_CHECK(family != nullptr, ConfigError, source, ": model_type \"", model_type,
              "\" is not a model pstar trains; known: ", decoder_family_names(), ", gpt2");
  DecoderConfig c = family_defaults(*family);
  // A wrapping model (Gemma3ForConditionalGeneration) keeps the decoder's keys in text_config.
  const bool wrapped = family->wrapper_model_type != nullptr && model_type != family->model_type;
  std::string where = source;
  const json* j = &top;
  if (wrapped) {
    PSTAR_CHECK(top.contains("text_config") && top.at("text_config").is_object(), ConfigError,
                source, ": a ", model_type, " config.json keeps its language model's shape in a ",
                "\"text_config\" object, which is missing");
    j = &top.at("text_config");
    where = source + " (text_config)";
    c.hf.wrapper = HfWrapper{model_type, "text_config", "", ""};
  }
  const json defaults = json::parse(family->hf_defaults);
  const HfFields f(*j, defaults, where);
  c.hidden = f.integer("hidden_size");
  c.intermediate = f.integer("intermediate_size");
  c.layers = f.integer("num_hidden_layers");
  c.heads = f.integer("num_attention_heads");
  c.kv_heads = f.integer("num_key_value_heads", c.heads);
  c.head_dim = f.integer("head_dim", c.hidden / c.heads);
  c.vocab_size = f.integer("vocab_size");
  c.max_positions = f.integer("max_position_embeddings", 2048);
  c.seq_len = std::min<int64_t>(2048, c.max_positions);
  c.norms.eps = f.number("rms_norm_eps", c.norms.eps);
  const std::string act = f.string(family->activation_key, mlp_activation_name(c.activation));
  const auto activation = parse_mlp_activation(act);
  PSTAR_CHECK(activation.has_value(), ConfigError, where, ": ", family->activation_key, " \"", act,
              "\" is not supported; supported: \"silu\", \"gelu_pytorch_tanh\"");
  c.activation = *activation;
  switch (family->attention_bias) {
    case AttentionBias::kFromKey:
      c.bias.qkv = c.bias.o = f.boolean("attention_bias", false);
      break;
    case AttentionBias::kQkvAlways:
      c.bias.qkv = true;
      break;
    case AttentionBias::kNever:
      break;
  }
  if (family->mlp_bias_key) c.bias.mlp = f.boolean("mlp_bias", false);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", c.tie_word_embeddings);
  c.pad_token_id.reset();
  if (const json pad = f.value("pad_token_id"); !pad.is_null()) {
    PSTAR_CHECK(
        pad.is_number_integer() && pad.get<int64_t>() >= 0 && pad.get<int64_t>() < c.vocab_size,
        ConfigError, where, ": \"pad_token_id\" must be a token id below vocab_size ", c.vocab_size,
        " or null, found ", pad.dump());
    c.pad_token_id = pad.get<int64_t>();
  }
  if (family->query_pre_attn_scalar)
    c.attention.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 0);
  refuse_unsupported(f);
  if (family->moe != nullptr) read_moe(f, *family, c);
  read_layer_kinds(f, *family, c);
  read_rope(*j, f, *family, c);
  validate_decoder_config(c, where);
  return c;
}

std::string decoder_config_to_hf_json(const DecoderConfig& c, const std::string& torch_dtype) {
  const DecoderFamily& family = *c.family;
  const RopeConfig& global = c.rope_of(LayerKind::kFull);
  json j = {
      {"architectures", {family.architecture}},
      {"model_type", family.model_type},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.intermediate},
      {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_positions},
      {"rms_norm_eps", c.norms.eps},
      {"rope_theta", global.theta},
      {family.activation_key, mlp_activation_name(c.activation)},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"pad_token_id", c.pad_token_id ? json(*c.pad_token_id) : json(nullptr)},
      {"torch_dtype", torch_dtype},
      {"initializer_range", 0.02},
      {"attention_dropout", 0.0},
  };
  switch (family.attention_bias) {
    case AttentionBias::kFromKey:
      PSTAR_INTERNAL_ASSERT(c.bias.qkv == c.bias.o, family.model_type,
                            "'s attention_bias covers q, k, v and o alike");
      j["attention_bias"] = c.bias.qkv;
      break;
    case AttentionBias::kQkvAlways:
    case AttentionBias::kNever:
      break;
  }
  if (family.mlp_bias_key) j["mlp_bias"] = c.bias.mlp;
  if (family.query_pre_attn_scalar)
    j["query_pre_attn_scalar"] = c.attention.query_pre_attn_scalar > 0
                                     ? c.attention.query_pre_attn_scalar
                                     : static_cast<double>(c.head_dim);
  if (global.type == RopeType::kDefault) {
    j["rope_scaling"] = nullptr;
  } else {
    json s = {{"rope_type", rope_type_name(global.type)}, {"factor", global.factor}};
    if (global.type == RopeType::kLlama3) {
      s["low_freq_factor"] = global.low_freq_factor;
      s["high_freq_factor"] = global.high_freq_factor;
      s["original_max_position_embeddings"] = global.original_max_position_embeddings;
    }
    j["rope_scaling"] = s;
  }
  const RopeConfig& local = c.rope_of(LayerKind::kSliding);
  if (family.local_rope) {
    PSTAR_INTERNAL_ASSERT(local.type == RopeType::kDefault, "rope_local_base_freq has no scaling");
    j["rope_local_base_freq"] = local.theta;
  } else {
    PSTAR_INTERNAL_ASSERT(local == global, family.model_type, " has one rotary embedding");
  }
  if (family.moe != nullptr) {
    const MoeSpelling& m = *family.moe;
    const MoeConfig& moe = *c.moe;
    j[m.experts_key] = moe.experts;
    j["num_experts_per_tok"] = moe.top_k;
    j[m.width_key] = moe.expert_intermediate;
    if (m.normalize_key) j["norm_topk_prob"] = moe.normalize_top_k;
    j["router_aux_loss_coef"] = moe.aux_loss_coef;
    j["output_router_logits"] = moe.aux_loss;
    if (m.sparse_layer_keys) {
      j["decoder_sparse_step"] = moe.sparse_step;
      j["mlp_only_layers"] = moe.dense_layers;
    }
  }
  // Which layers slide: the family's own keys, and layer_types where its class reads them, so
  // that transformers before and after layer_types load the same model.
  json kinds = json::array();
  std::vector<LayerKind> all;
  for (int64_t i = 0; i < c.layers; ++i) all.push_back(c.layer_kind(i));
  for (LayerKind k : all) kinds.push_back(layer_kind_name(k));
  j["sliding_window"] =
      c.attention.sliding_window ? json(*c.attention.sliding_window) : json(nullptr);
  switch (family.sliding) {
    case SlidingRule::kNever:
    case SlidingRule::kAllLayers:
      PSTAR_INTERNAL_ASSERT(
          !c.has_sliding_layers() || all == family_layer_kinds(family, c.layers, true, 0, 0),
          family.model_type, " slides every layer or none");
      break;
    case SlidingRule::kFromMaxWindow: {
      const auto first = std::find(all.begin(), all.end(), LayerKind::kSliding);
      j["use_sliding_window"] = c.has_sliding_layers();
      j["max_window_layers"] = static_cast<int64_t>(first - all.begin());
      j["layer_types"] = kinds;
      break;
    }
    case SlidingRule::kPattern: {
      for (int64_t p = 1; p <= c.layers + 1; ++p)
        if (family_layer_kinds(family, c.layers, true, 0, p) == all) {
          j["sliding_window_pattern"] = p;
          break;
        }
      j["layer_types"] = kinds;
      break;
    }
  }
  return j.dump(2) + "\n";
}

std::string wrapped_config_json(const std::string& original, const DecoderConfig& c,
                                const std::string& torch_dtype, const std::string& source) {
  PSTAR_INTERNAL_ASSERT(c.hf.wrapper.has_value(), "a wrapped config.json for a plain decoder");
  json top = parse_object(original, source);
  json decoder = json::parse(decoder_config_to_hf_json(c, torch_dtype));
  decoder.erase("architectures");
  decoder.erase("torch_dtype");
  json& section = top[c.hf.wrapper->config_key];
  if (!section.is_object()) section = json::object();
  for (auto& [key, value] : decoder.items()) section[key] = value;
  top["torch_dtype"] = torch_dtype;
  return top.dump(2) + "\n";
}

}  // namespace pstar::model
