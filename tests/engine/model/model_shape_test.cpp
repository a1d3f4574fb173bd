// Resolving the model a config describes: the family from model.type, the preset or a Hugging Face
// folder's config.json; shape keys beside a folder must agree with it.
#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/hf_decoder_config.h"
#include "pstar/model/model_shape.h"
#include "test_util.h"

namespace pstar::model {
namespace {

using pstar::testing::message_of;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

config::ModelConfig model_config(const std::string& type, const std::string& preset) {
  config::ModelConfig m;
  m.type = type;
  m.preset = preset;
  return m;
}

TEST(ModelShapeTest, TheFamilyComesFromTypePresetOrNeither) {
  EXPECT_EQ(resolve_model_shape(model_config("", "llama-3.1-8b")).family, ModelFamily::kDecoder);
  // "llama" is the decoder's former name: any family's preset.
  EXPECT_EQ(resolve_model_shape(model_config("llama", "mistral-7b")).decoder.model_type(),
            std::string("mistral"));
  EXPECT_EQ(resolve_model_shape(model_config("decoder", "qwen3-8b")).decoder.model_type(),
            std::string("qwen3"));
  EXPECT_EQ(resolve_model_shape(model_config("", "gpt-mini")).family, ModelFamily::kGpt);
  EXPECT_EQ(resolve_model_shape(model_config("gpt", "gpt2-small")).gpt.hidden, 768);
  const std::string e =
      message_of<ConfigError>([] { resolve_model_shape(model_config("gpt", "qwen2.5-7b")); });
  EXPECT_NE(e.find("is a qwen2 model"), std::string::npos) << e;
  EXPECT_NE(e.find("\"decoder\""), std::string::npos) << e;
  const std::string unknown =
      message_of<ConfigError>([] { resolve_model_shape(model_config("llama", "gpt-mini")); });
  EXPECT_NE(unknown.find("llama-3.1-8b"), std::string::npos) << unknown;  // lists the known ones
}

TEST(ModelShapeTest, PresetOverridesAndWhatPlannersRead) {
  config::ModelConfig m = model_config("", "llama-tiny");
  m.layers = 3;
  m.seq_len = 32;
  const ModelShape s = resolve_model_shape(m);
  EXPECT_EQ(s.layers(), 3);
  EXPECT_EQ(s.seq_len(), 32);
  int64_t total = 0;
  for (int64_t n : s.leaf_numels()) total += n;
  EXPECT_EQ(total, s.num_params());
  EXPECT_EQ(s.parameter_shapes().size(), decoder_parameter_shapes(s.decoder).size());
  const auto embedding = s.embedding_leaves();
  EXPECT_TRUE(embedding[0]);
  EXPECT_EQ(std::count(embedding.begin(), embedding.end(), true), 1);  // lm_head is a linear
  const auto gpt_embedding = resolve_model_shape(model_config("", "gpt-tiny")).embedding_leaves();
  EXPECT_EQ(std::count(gpt_embedding.begin(), gpt_embedding.end(), true), 2);  // wte, wpe
  EXPECT_NE(s.describe().find("4 query / 2 key-value heads"), std::string::npos) << s.describe();
}

// decoder_leaf_module_numels counts leaves directly (for the estimator's speed): it must agree with
// the parameters decoder_parameter_shapes names, leaf by leaf, whatever the biases and tying.
TEST(ModelShapeTest, LlamaLeafSizesAreTheParametersOfEachLeaf) {
  for (const auto& preset : decoder_presets()) {
    for (int variant = 0; variant < 4; ++variant) {
      DecoderConfig c = preset.config;
      c.layers = 3;
      if (variant == 1) c.tie_word_embeddings = !c.tie_word_embeddings;
      if (variant == 2) c.bias.qkv = c.bias.o = c.bias.mlp = true;
      if (variant == 3) c.bias.qkv = !c.bias.qkv;
      SCOPED_TRACE(str_cat(preset.name, " variant ", variant));
      std::vector<int64_t> from_params;
      for (const auto& p : decoder_parameter_shapes(c)) {
        int64_t n = 1;
        for (int64_t d : p.shape) n *= d;
        if (p.leaf >= static_cast<int64_t>(from_params.size())) from_params.resize(p.leaf + 1, 0);
        from_params[static_cast<size_t>(p.leaf)] += n;
      }
      EXPECT_EQ(decoder_leaf_module_numels(c), from_params);
    }
  }
}

TEST(ModelShapeTest, AFolderGivesTheShapeAndKeysBesideItMustAgree) {
  ScratchDir dir;
  DecoderConfig c = *find_decoder_preset("llama-tiny");
  write_text(dir.file("config.json"), decoder_config_to_hf_json(c, "bfloat16"));
  write_text(dir.file("model.safetensors"), "");  // read_hf_folder checks it exists; not read here
  config::ModelConfig m;
  m.type = "";
  m.init_from = dir.path().string();
  m.seq_len = 100;  // the training length may differ from the preset's, up to max positions
  const ModelShape s = resolve_model_shape(m);
  EXPECT_EQ(s.family, ModelFamily::kDecoder);
  EXPECT_EQ(s.hf_folder, dir.path().string());
  EXPECT_EQ(s.decoder.kv_heads, c.kv_heads);
  EXPECT_EQ(s.seq_len(), 100);

  m.hidden = 128;
  std::string e = message_of<ConfigError>([&] { resolve_model_shape(m); });
  EXPECT_NE(e.find("model.hidden is 128"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size = 64"), std::string::npos) << e;
  m.hidden.reset();
  m.seq_len = 4096;
  e = message_of<ConfigError>([&] { resolve_model_shape(m); });
  EXPECT_NE(e.find("exceeds max_position_embeddings 128"), std::string::npos) << e;
  m.seq_len.reset();
  m.type = "gpt";
  e = message_of<ConfigError>([&] { resolve_model_shape(m); });
  EXPECT_NE(e.find("model.type \"decoder\""), std::string::npos) << e;
}

TEST(ModelShapeTest, AGpt2FolderIsTheGptFamily) {
  ScratchDir dir;
  write_text(dir.file("config.json"),
             R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                 "vocab_size": 256, "n_positions": 64})");
  write_text(dir.file("model.safetensors"), "");
  config::ModelConfig m;
  m.type = "";
  m.init_from = dir.path().string();
  const ModelShape s = resolve_model_shape(m);
  EXPECT_EQ(s.family, ModelFamily::kGpt);
  EXPECT_EQ(s.gpt.hidden, 64);
  EXPECT_EQ(s.gpt.seq_len, 64);
  EXPECT_EQ(s.num_params(), s.gpt.num_params());
}

}  // namespace
}  // namespace pstar::model
