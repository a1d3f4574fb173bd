#include "pstar/model/model_shape.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/family.h"
#include "pstar/model/hf_decoder_config.h"

namespace pstar::model {
namespace {

// GPT-2's config.json (GPT2Config) names its shape n_embd, n_layer, n_head, n_positions.
GptConfig gpt_config_from_hf_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  PSTAR_CHECK(j.is_object(), ConfigError, source, ": not a JSON object");
  auto field = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) -> int64_t {
    if (!j.contains(key)) {
      PSTAR_CHECK(fallback.has_value(), ConfigError, source, ": missing \"", key,
                  "\"; GPT-2's config.json has it");
      return *fallback;
    }
    PSTAR_CHECK(j.at(key).is_number_integer() && j.at(key).get<int64_t>() > 0, ConfigError, source,
                ": \"", key, "\" must be a positive integer, found ", j.at(key).dump());
    return j.at(key).get<int64_t>();
  };
  GptConfig c;
  c.hidden = field("n_embd");
  c.layers = field("n_layer");
  c.heads = field("n_head");
  c.vocab_size = field("vocab_size", 50257);
  c.seq_len = field("n_positions", 1024);
  PSTAR_CHECK(c.hidden % c.heads == 0, ConfigError, source, ": n_embd ", c.hidden,
              " is not a multiple of n_head ", c.heads);
  return c;
}

// A shape key beside model.init_from must say what the folder says.
void check_agrees(const std::optional<int64_t>& given, int64_t folder, const char* key,
                  const char* hf_key, const std::string& source) {
  PSTAR_CHECK(!given || *given == folder, ConfigError, "model.", key, " is ", given.value_or(0),
              " but ", source, " says ", hf_key, " = ", folder, "; drop model.", key,
              " (the folder's config.json decides the shape) or use a "
              "folder of that shape");
}

// Every tensor's name in the folder: the index's, or the single file's header.
std::vector<std::string> tensor_names(const formats::HfFolder& folder) {
  std::vector<std::string> names;
  if (!folder.index_path.empty()) {
    for (const auto& [name, shard] : folder.shard_of) names.push_back(name);
  } else {
    const formats::SafetensorsReader reader(folder.shards.front());
    for (const auto& t : reader.tensors()) names.push_back(t.name);
  }
  return names;
}

// Where a wrapping folder keeps the decoder's weights: the published Gemma 3 4B-27B files under
// language_model.model.* (head language_model.lm_head.*), transformers 5 under
// model.language_model.* (head lm_head.*). Read from the tensors' names.
void find_wrapped_weights(const std::vector<std::string>& names, const formats::HfFolder& folder,
                          HfWrapper& wrapper) {
  const std::pair<const char*, const char*> layouts[] = {
      {"language_model.model.", "language_model.lm_head."},
      {"model.language_model.", "lm_head."},
  };
  for (const auto& [prefix, head] : layouts) {
    const std::string embed = std::string(prefix) + "embed_tokens.weight";
    if (std::find(names.begin(), names.end(), embed) != names.end()) {
      wrapper.weight_prefix = prefix;
      wrapper.head_prefix = head;
      return;
    }
  }
  PSTAR_THROW(FormatError, folder.dir, ": a ", wrapper.model_type,
              " folder keeps its language model under language_model.model.* or "
              "model.language_model.*, but neither language_model.model.embed_tokens.weight nor "
              "model.language_model.embed_tokens.weight is among its tensors");
}

ModelShape from_folder(const config::ModelConfig& m) {
  const formats::HfFolder folder = formats::read_hf_folder(m.init_from);
  ModelShape s;
  s.hf_folder = m.init_from;
  const std::string& source = folder.config_path;
  if (folder.model_type == "gpt2") {
    s.family = ModelFamily::kGpt;
    s.gpt = gpt_config_from_hf_json(folder.config_text, source);
    check_agrees(m.hidden, s.gpt.hidden, "hidden", "n_embd", source);
    check_agrees(m.layers, s.gpt.layers, "layers", "n_layer", source);
    check_agrees(m.heads, s.gpt.heads, "heads", "n_head", source);
    check_agrees(m.vocab_size, s.gpt.vocab_size, "vocab_size", "vocab_size", source);
    // GPT-2 learns one position embedding per position: the training length is the folder's.
    check_agrees(m.seq_len, s.gpt.seq_len, "seq_len", "n_positions", source);
  } else {
    s.family = ModelFamily::kDecoder;
    s.decoder = decoder_config_from_hf_json(folder.config_text, source);
    HfLayout& layout = s.decoder.hf;
    if (layout.wrapper || s.decoder.moe) {
      const std::vector<std::string> names = tensor_names(folder);
      if (layout.wrapper) find_wrapped_weights(names, folder, *layout.wrapper);
      // transformers 5 saves each layer's experts as two fused tensors.
      layout.fused_experts =
          s.decoder.moe && std::any_of(names.begin(), names.end(), [](const std::string& n) {
            return ends_with(n, ".experts.gate_up_proj");
          });
    }
    check_agrees(m.hidden, s.decoder.hidden, "hidden", "hidden_size", source);
    check_agrees(m.layers, s.decoder.layers, "layers", "num_hidden_layers", source);
    check_agrees(m.heads, s.decoder.heads, "heads", "num_attention_heads", source);
    check_agrees(m.vocab_size, s.decoder.vocab_size, "vocab_size", "vocab_size", source);
    if (m.seq_len) s.decoder.seq_len = *m.seq_len;
    validate_decoder_config(s.decoder, source);
  }
  const char* wanted = model_family_name(s.family);
  const bool agrees = m.type.empty() || m.type == wanted ||
                      (s.family == ModelFamily::kDecoder && m.type == "llama");
  PSTAR_CHECK(agrees, ConfigError, "model.type is \"", m.type, "\" but ", source, " describes a ",
              folder.model_type, " model (model.type \"", wanted,
              "\"); drop model.type or set it to \"", wanted, "\"");
  PSTAR_CHECK(m.preset.empty(), ConfigError, "model.preset \"", m.preset,
              "\" and a model folder in model.init_from both give the shape; keep one");
  return s;
}

ModelShape decoder_from_preset(const config::ModelConfig& m) {
  ModelShape s;
  s.family = ModelFamily::kDecoder;
  PSTAR_CHECK(!m.preset.empty(), ConfigError, "model.type \"", m.type,
              "\" needs model.preset (one of: ", decoder_preset_names(),
              ") or model.init_from naming a Hugging Face model folder");
  const DecoderConfig* preset = find_decoder_preset(m.preset);
  PSTAR_CHECK(preset != nullptr, ConfigError, "model.preset: unknown decoder preset '", m.preset,
              "'; known: ", decoder_preset_names());
  s.decoder = *preset;
  DecoderConfig& c = s.decoder;
  // A width or head count given beside a preset keeps head_dim = hidden / heads, as before
  // head_dim was a field of its own.
  if (m.hidden) {
    c.hidden = *m.hidden;
    c.head_dim = c.hidden / c.heads;
  }
  if (m.layers && *m.layers != c.layers) {
    // The preset's rule of which layers slide, at the new depth.
    const bool sliding = c.has_sliding_layers();
    c.layers = *m.layers;
    c.attention.layer_kinds =
        family_layer_kinds(*c.family, c.layers, sliding, 0, default_sliding_pattern(*c.family));
  }
  if (m.heads) {
    c.heads = *m.heads;
    c.head_dim = c.hidden / c.heads;
  }
  if (m.vocab_size) {
    c.vocab_size = *m.vocab_size;
    // A smaller vocabulary may drop the padding row with the rest.
    if (c.pad_token_id && *c.pad_token_id >= c.vocab_size) c.pad_token_id.reset();
  }
  if (m.seq_len) {
    c.seq_len = *m.seq_len;
    c.max_positions = std::max(c.max_positions, c.seq_len);
  }
  validate_decoder_config(c, "model (preset " + m.preset + ")");
  return s;
}

}  // namespace

const char* model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kGpt:
      return "gpt";
    case ModelFamily::kDecoder:
      return "decoder";
  }
  return "?";
}

ModelShape resolve_model_shape(const config::ModelConfig& m) {
  if (!m.init_from.empty() && formats::is_directory(m.init_from)) return from_folder(m);
  const bool decoder_preset = !m.preset.empty() && find_decoder_preset(m.preset) != nullptr;
  const bool decoder_type = m.type == "decoder" || m.type == "llama";
  if (decoder_type || (m.type.empty() && decoder_preset)) return decoder_from_preset(m);
  PSTAR_CHECK(!decoder_preset, ConfigError, "model.preset '", m.preset, "' is a ",
              find_decoder_preset(m.preset)->model_type(), " model but model.type is \"", m.type,
              "\"; drop model.type or set it to \"decoder\"");
  ModelShape s;
  s.family = ModelFamily::kGpt;
  config::ModelConfig gpt = m;
  gpt.type = "gpt";
  s.gpt = resolve_gpt_config(gpt);
  return s;
}

std::string hf_config_json(const ModelShape& shape, const std::string& torch_dtype) {
  if (shape.family == ModelFamily::kDecoder) {
    const DecoderConfig& c = shape.decoder;
    if (!c.hf.wrapper) return decoder_config_to_hf_json(c, torch_dtype);
    const formats::HfFolder folder = formats::read_hf_folder(shape.hf_folder);
    return wrapped_config_json(folder.config_text, c, torch_dtype, folder.config_path);
  }
  const GptConfig& c = shape.gpt;
  const nlohmann::json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"n_embd", c.hidden},
      {"n_layer", c.layers},
      {"n_head", c.heads},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.seq_len},
      {"n_ctx", c.seq_len},
      {"layer_norm_epsilon", c.layer_norm_eps},
      {"activation_function", "gelu_new"},
      {"tie_word_embeddings", true},
      {"torch_dtype", torch_dtype},
  };
  return j.dump(2) + "\n";
}

int64_t ModelShape::num_params() const {
  return family == ModelFamily::kGpt ? gpt.num_params() : decoder.num_params();
}
int64_t ModelShape::vocab_size() const {
  return family == ModelFamily::kGpt ? gpt.vocab_size : decoder.vocab_size;
}
int64_t ModelShape::seq_len() const {
  return family == ModelFamily::kGpt ? gpt.seq_len : decoder.seq_len;
}
int64_t ModelShape::hidden() const {
  return family == ModelFamily::kGpt ? gpt.hidden : decoder.hidden;
}
int64_t ModelShape::layers() const {
  return family == ModelFamily::kGpt ? gpt.layers : decoder.layers;
}

std::vector<int64_t> ModelShape::leaf_numels() const {
  return family == ModelFamily::kGpt ? gpt_leaf_module_numels(gpt)
                                     : decoder_leaf_module_numels(decoder);
}

std::vector<bool> ModelShape::embedding_leaves() const {
  std::vector<bool> embedding(leaf_numels().size(), false);
  embedding[0] = true;                                   // wte / embed_tokens
  if (family == ModelFamily::kGpt) embedding[1] = true;  // wpe
  return embedding;
}

std::vector<ParameterShape> ModelShape::parameter_shapes() const {
  if (family == ModelFamily::kDecoder) return decoder_parameter_shapes(decoder);
  std::vector<ParameterShape> out;
  for (auto& p : gpt_parameter_shapes(gpt)) out.push_back({p.name, p.shape, p.leaf});
  return out;
}

std::string ModelShape::describe() const {
  const double millions = static_cast<double>(num_params()) / 1e6;
  if (family == ModelFamily::kGpt)
    return str_cat("gpt: ", gpt.layers, " layers, hidden ", gpt.hidden, ", ", gpt.heads,
                   " heads, vocabulary ", gpt.vocab_size, ", seq_len ", gpt.seq_len, ", ", millions,
                   "M parameters");
  const DecoderConfig& c = decoder;
  int64_t sliding = 0;
  for (LayerKind k : c.attention.layer_kinds) sliding += k == LayerKind::kSliding ? 1 : 0;
  const RopeConfig& rope = c.rope_of(LayerKind::kFull);
  return str_cat(
      c.model_type(), ": ", c.layers, " layers",
      sliding > 0 ? str_cat(" (", sliding, " with a sliding window of ",
                            c.attention.sliding_window.value_or(0), ")")
                  : std::string(),
      ", hidden ", c.hidden, ", ", c.heads, " query / ", c.kv_heads, " key-value heads of ",
      c.head_dim, c.norms.qk ? " (q/k norms)" : "", ", gated ", mlp_activation_name(c.activation),
      " MLP ", c.intermediate, ", vocabulary ", c.vocab_size,
      c.tie_word_embeddings ? " (tied)" : "", ", seq_len ", c.seq_len, ", rope_theta ", rope.theta,
      rope.type != RopeType::kDefault ? str_cat(" (", rope_type_name(rope.type), " scaling)")
                                      : std::string(),
      ", ", millions, "M parameters");
}

}  // namespace pstar::model
