#include "pstar/model/model_shape.h"

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/formats/config.h"
#include "pstar/formats/hf_folder.h"

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
    s.family = ModelFamily::kLlama;
    s.llama = llama_config_from_hf_json(folder.config_text, source);
    check_agrees(m.hidden, s.llama.hidden, "hidden", "hidden_size", source);
    check_agrees(m.layers, s.llama.layers, "layers", "num_hidden_layers", source);
    check_agrees(m.heads, s.llama.heads, "heads", "num_attention_heads", source);
    check_agrees(m.vocab_size, s.llama.vocab_size, "vocab_size", "vocab_size", source);
    if (m.seq_len) s.llama.seq_len = *m.seq_len;
    validate_llama_config(s.llama, source);
  }
  const char* wanted = s.family == ModelFamily::kGpt ? "gpt" : "llama";
  PSTAR_CHECK(m.type.empty() || m.type == wanted, ConfigError, "model.type is \"", m.type,
              "\" but ", source, " describes a ", folder.model_type, " model (model.type \"",
              wanted, "\"); drop model.type or set it to \"", wanted, "\"");
  PSTAR_CHECK(m.preset.empty(), ConfigError, "model.preset \"", m.preset,
              "\" and a model folder in model.init_from both give the shape; keep one");
  return s;
}

std::string llama_preset_names() {
  std::string names;
  for (const auto& p : llama_presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

ModelShape llama_from_preset(const config::ModelConfig& m) {
  ModelShape s;
  s.family = ModelFamily::kLlama;
  PSTAR_CHECK(!m.preset.empty(), ConfigError,
              "model.type \"llama\" needs model.preset (one of: ", llama_preset_names(),
              ") or model.init_from naming a Hugging Face model folder");
  const LlamaConfig* preset = find_llama_preset(m.preset);
  PSTAR_CHECK(preset != nullptr, ConfigError, "model.preset: unknown Llama-family preset '",
              m.preset, "'; known: ", llama_preset_names());
  s.llama = *preset;
  LlamaConfig& c = s.llama;
  if (m.hidden) {
    c.hidden = *m.hidden;
    c.head_dim = c.hidden / c.heads;
  }
  if (m.layers) c.layers = *m.layers;
  if (m.heads) {
    c.heads = *m.heads;
    c.head_dim = c.hidden / c.heads;
  }
  if (m.vocab_size) c.vocab_size = *m.vocab_size;
  if (m.seq_len) {
    c.seq_len = *m.seq_len;
    c.max_positions = std::max(c.max_positions, c.seq_len);
  }
  validate_llama_config(c, "model (preset " + m.preset + ")");
  return s;
}

}  // namespace

const char* model_family_name(ModelFamily family) {
  return family == ModelFamily::kGpt ? "gpt" : "llama";
}

ModelShape resolve_model_shape(const config::ModelConfig& m) {
  if (!m.init_from.empty() && formats::is_directory(m.init_from)) return from_folder(m);
  const bool llama_preset = !m.preset.empty() && find_llama_preset(m.preset) != nullptr;
  if (m.type == "llama" || (m.type.empty() && llama_preset)) return llama_from_preset(m);
  PSTAR_CHECK(!llama_preset, ConfigError, "model.preset '", m.preset,
              "' is a Llama-family model but model.type is \"", m.type,
              "\"; drop model.type or set it to \"llama\"");
  ModelShape s;
  s.family = ModelFamily::kGpt;
  config::ModelConfig gpt = m;
  gpt.type = "gpt";
  s.gpt = resolve_gpt_config(gpt);
  return s;
}

std::string hf_config_json(const ModelShape& shape, const std::string& torch_dtype) {
  if (shape.family == ModelFamily::kLlama) return llama_config_to_hf_json(shape.llama, torch_dtype);
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
  return family == ModelFamily::kGpt ? gpt.num_params() : llama.num_params();
}
int64_t ModelShape::vocab_size() const {
  return family == ModelFamily::kGpt ? gpt.vocab_size : llama.vocab_size;
}
int64_t ModelShape::seq_len() const {
  return family == ModelFamily::kGpt ? gpt.seq_len : llama.seq_len;
}
int64_t ModelShape::hidden() const {
  return family == ModelFamily::kGpt ? gpt.hidden : llama.hidden;
}
int64_t ModelShape::layers() const {
  return family == ModelFamily::kGpt ? gpt.layers : llama.layers;
}

std::vector<int64_t> ModelShape::leaf_numels() const {
  return family == ModelFamily::kGpt ? gpt_leaf_module_numels(gpt)
                                     : llama_leaf_module_numels(llama);
}

std::vector<bool> ModelShape::embedding_leaves() const {
  std::vector<bool> embedding(leaf_numels().size(), false);
  embedding[0] = true;                                   // wte / embed_tokens
  if (family == ModelFamily::kGpt) embedding[1] = true;  // wpe
  return embedding;
}

std::vector<ParameterShape> ModelShape::parameter_shapes() const {
  if (family == ModelFamily::kLlama) return llama_parameter_shapes(llama);
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
  const LlamaConfig& c = llama;
  return str_cat(c.model_type, ": ", c.layers, " layers, hidden ", c.hidden, ", ", c.heads,
                 " query / ", c.kv_heads, " key-value heads of ", c.head_dim, ", SwiGLU ",
                 c.intermediate, ", vocabulary ", c.vocab_size,
                 c.tie_word_embeddings ? " (tied)" : "", ", seq_len ", c.seq_len, ", rope_theta ",
                 c.rope_theta, c.rope_scaling ? " (llama3 scaling)" : "", ", ", millions,
                 "M parameters");
}

}  // namespace pstar::model
