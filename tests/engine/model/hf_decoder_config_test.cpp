// A decoder's config.json in and out (model/hf_decoder_config.cpp) and the presets: the published
// files of every preset read back as the preset, transformers 4's and 5's RoPE spellings give the
// same model, and each feature pstar does not compute is refused by name.
#include <cstdio>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/family.h"
#include "pstar/model/hf_decoder_config.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::model {
namespace {

// Every field a DecoderConfig holds, compared one by one so that a failure names it.
void expect_same(const DecoderConfig& a, const DecoderConfig& b) {
  EXPECT_STREQ(a.model_type(), b.model_type());
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.intermediate, b.intermediate);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_positions, b.max_positions);
  EXPECT_EQ(a.norms.eps, b.norms.eps);
  EXPECT_EQ(a.norms.kind, b.norms.kind);
  EXPECT_EQ(a.norms.sandwich, b.norms.sandwich);
  EXPECT_EQ(a.norms.qk, b.norms.qk);
  EXPECT_EQ(a.embed_scale, b.embed_scale);
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.query_scale(), b.query_scale());
  EXPECT_EQ(a.bias.qkv, b.bias.qkv);
  EXPECT_EQ(a.bias.o, b.bias.o);
  EXPECT_EQ(a.bias.mlp, b.bias.mlp);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.pad_token_id, b.pad_token_id);
  EXPECT_EQ(a.attention.layer_kinds, b.attention.layer_kinds);
  EXPECT_EQ(a.attention.sliding_window, b.attention.sliding_window);
  for (int k = 0; k < kLayerKinds; ++k)
    EXPECT_TRUE(a.attention.rope[static_cast<size_t>(k)] ==
                b.attention.rope[static_cast<size_t>(k)])
        << layer_kind_name(static_cast<LayerKind>(k)) << " rope: theta "
        << a.attention.rope[static_cast<size_t>(k)].theta << " against "
        << b.attention.rope[static_cast<size_t>(k)].theta;
  ASSERT_EQ(a.moe.has_value(), b.moe.has_value());
  if (a.moe) {
    EXPECT_EQ(a.moe->experts, b.moe->experts);
    EXPECT_EQ(a.moe->top_k, b.moe->top_k);
    EXPECT_EQ(a.moe->expert_intermediate, b.moe->expert_intermediate);
    EXPECT_EQ(a.moe->normalize_top_k, b.moe->normalize_top_k);
    EXPECT_EQ(a.moe->aux_loss_coef, b.moe->aux_loss_coef);
    EXPECT_EQ(a.moe->aux_loss, b.moe->aux_loss);
    EXPECT_EQ(a.moe->sparse_step, b.moe->sparse_step);
    EXPECT_EQ(a.moe->dense_layers, b.moe->dense_layers);
    EXPECT_EQ(a.active_params(), b.active_params());
  }
  EXPECT_EQ(a.num_params(), b.num_params());
}

std::string read(const std::string& path) { return pstar::testing::read_text(path); }

TEST(HfDecoderConfigTest, PresetsHaveThePublishedParameterCounts) {
  // The totals Hugging Face's model cards and safetensors indexes report.
  const std::map<std::string, int64_t> published = {
      {"llama-3.2-1b", 1235814400LL}, {"llama-3.2-3b", 3212749824LL},
      {"llama-3.1-8b", 8030261248LL}, {"llama-2-13b", 13015864320LL},
      {"mistral-7b", 7241732096LL},   {"qwen2.5-7b", 7615616512LL},
      {"qwen2.5-14b", 14770033664LL}, {"llama-3.1-70b", 70553706496LL},
      {"qwen3-8b", 8190735360LL},     {"gemma-3-1b", 999885952LL},
      {"phi-4", 14659507200LL},
  };
  for (const auto& [name, count] : published) {
    const DecoderConfig* c = find_decoder_preset(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->num_params(), count) << name;
  }
  EXPECT_EQ(find_decoder_preset("llama-4"), nullptr);
}

// tests/data/hf_configs holds the config.json each new preset stands for, as published: read
// through the family's row (Gemma 3's 4B-27B through Gemma3TextConfig's defaults), each is the
// preset, and the parameters its shapes give, counted by the Hugging Face-derived reference script
// (tests/reference/decoder_reference.py --count), are the preset's.
TEST(HfDecoderConfigTest, PublishedConfigJsonFilesAreThePresets) {
  const std::string python = pstar::testing::python_with_torch();
  const std::string dir = std::string(PSTAR_SOURCE_DIR) + "/tests/data/hf_configs/";
  for (const char* name :
       {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "gemma-3-1b",
        "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "phi-4", "mixtral-8x7b", "qwen3-30b-a3b"}) {
    SCOPED_TRACE(name);
    const std::string path = dir + name + ".json";
    DecoderConfig read_back = decoder_config_from_hf_json(read(path), path);
    const DecoderConfig* preset = find_decoder_preset(name);
    ASSERT_NE(preset, nullptr);
    const std::set<std::string> wrapped = {"gemma-3-4b", "gemma-3-12b", "gemma-3-27b"};
    EXPECT_EQ(read_back.hf.wrapper.has_value(), wrapped.count(name) > 0);
    read_back.seq_len = preset->seq_len;
    expect_same(read_back, *preset);
    if (python.empty()) continue;  // the count below needs torch; said once at the end
    const std::string out = pstar::testing::command_output(
        python + " " + PSTAR_SOURCE_DIR + "/tests/reference/decoder_reference.py --count " + path);
    EXPECT_EQ(std::stoll(out), preset->num_params());
  }
  if (python.empty())
    GTEST_SKIP() << "the configs were read, but no Python with torch counts their shapes "
                    "independently (Debian: apt-get install python3-torch)";
}

TEST(HfDecoderConfigTest, EveryPresetRoundTripsThroughConfigJson) {
  for (const auto& preset : decoder_presets()) {
    SCOPED_TRACE(preset.name);
    const DecoderConfig& c = preset.config;
    DecoderConfig back =
        decoder_config_from_hf_json(decoder_config_to_hf_json(c, "bfloat16"), "config.json");
    back.seq_len = c.seq_len;  // a training choice, not in the file
    expect_same(back, c);
  }
}

// transformers 5 writes rope_parameters (one object, or one per layer type) and no rope_theta.
TEST(HfDecoderConfigTest, RopeParametersGiveTheModelOfRopeTheta) {
  const std::string shape = R"("hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 100, "max_position_embeddings": 4096)";
  const DecoderConfig v4 = decoder_config_from_hf_json(
      R"({"model_type": "llama", "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
          "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 1024}, )" +
          shape + "}",
      "v4/config.json");
  const DecoderConfig v5 = decoder_config_from_hf_json(
      R"({"model_type": "llama", "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3",
          "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 1024}, )" +
          shape + "}",
      "v5/config.json");
  EXPECT_EQ(v5.attention.rope[0].theta, 500000.0);
  EXPECT_EQ(v5.attention.rope[0].type, RopeType::kLlama3);
  expect_same(v5, v4);

  // Gemma 3: one entry per layer type; the global one linearly scaled.
  const std::string gemma = R"("model_type": "gemma3_text", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "sliding_window": 8)";
  const DecoderConfig g4 = decoder_config_from_hf_json(
      "{" + gemma + R"(, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0}})",
      "g4/config.json");
  const DecoderConfig g5 = decoder_config_from_hf_json("{" + gemma + R"(, "rope_parameters": {
          "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})",
                                                       "g5/config.json");
  EXPECT_EQ(g5.rope_of(LayerKind::kSliding).theta, 10000.0);
  EXPECT_EQ(g5.rope_of(LayerKind::kFull).type, RopeType::kLinear);
  EXPECT_EQ(g5.layer_kind(5), LayerKind::kFull);
  EXPECT_EQ(g5.layer_kind(4), LayerKind::kSliding);
  expect_same(g5, g4);
}

TEST(HfDecoderConfigTest, FamilyFieldsAndDefaults) {
  // A Llama 3.1 8B config.json as published, abridged to the fields that shape the network.
  const std::string llama31 = R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu",
    "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "torch_dtype": "bfloat16"})";
  const DecoderConfig c = decoder_config_from_hf_json(llama31, "8b/config.json");
  EXPECT_EQ(c.head_dim, 128);
  expect_same(c, *find_decoder_preset("llama-3.1-8b"));
  // Qwen2: q/k/v biases whatever attention_bias says; a sliding_window without use_sliding_window
  // does not apply, and with it only from max_window_layers on.
  const std::string qwen2 = R"("model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 100, "rope_theta": 1e6, "sliding_window": 16, "max_window_layers": 3)";
  const DecoderConfig q = decoder_config_from_hf_json(
      "{" + qwen2 + R"(, "use_sliding_window": false})", "q/config.json");
  EXPECT_TRUE(q.bias.qkv);
  EXPECT_FALSE(q.bias.o);
  EXPECT_FALSE(q.has_sliding_layers());
  const DecoderConfig qs = decoder_config_from_hf_json(
      "{" + qwen2 + R"(, "use_sliding_window": true})", "q/config.json");
  const std::vector<LayerKind> from_three = {LayerKind::kFull, LayerKind::kFull, LayerKind::kFull,
                                             LayerKind::kSliding};
  EXPECT_EQ(qs.attention.layer_kinds, from_three);
  EXPECT_EQ(qs.attention.sliding_window, 16);
  // layer_types, where given, decides.
  const DecoderConfig listed = decoder_config_from_hf_json(
      "{" + qwen2 + R"(, "layer_types": ["sliding_attention", "full_attention",
          "sliding_attention", "full_attention"]})",
      "q/config.json");
  EXPECT_EQ(listed.layer_kind(0), LayerKind::kSliding);
  EXPECT_EQ(listed.layer_kind(1), LayerKind::kFull);
  // Phi-3 never has biases, and its fused projections are the name map's business.
  const DecoderConfig phi = decoder_config_from_hf_json(
      read(std::string(PSTAR_SOURCE_DIR) + "/tests/data/hf_configs/phi-4.json"),
      "phi-4/config.json");
  EXPECT_FALSE(phi.bias.qkv || phi.bias.o || phi.bias.mlp);
  EXPECT_EQ(phi.pad_token_id, 100257);
  EXPECT_TRUE(phi.family->fused_projections);
}

TEST(HfDecoderConfigTest, AWrappingConfigJsonIsWrittenBackAroundTheDecoder) {
  const std::string path = std::string(PSTAR_SOURCE_DIR) + "/tests/data/hf_configs/gemma-3-4b.json";
  const std::string original = read(path);
  DecoderConfig c = decoder_config_from_hf_json(original, path);
  ASSERT_TRUE(c.hf.wrapper.has_value());
  EXPECT_EQ(c.hf.wrapper->model_type, "gemma3");
  c.hf.wrapper->weight_prefix = "language_model.model.";
  const auto j = nlohmann::json::parse(wrapped_config_json(original, c, "float32", path));
  EXPECT_EQ(j.at("model_type"), "gemma3");
  EXPECT_EQ(j.at("architectures")[0], "Gemma3ForConditionalGeneration");
  EXPECT_EQ(j.at("vision_config").at("image_size"), 896);
  EXPECT_EQ(j.at("torch_dtype"), "float32");
  EXPECT_EQ(j.at("text_config").at("num_attention_heads"), 8);  // a default, written out
  DecoderConfig back = decoder_config_from_hf_json(j.dump(), "back/config.json");
  back.seq_len = c.seq_len;
  expect_same(back, c);
}

TEST(HfDecoderConfigTest, BadConfigJsonNamesFileKeyAndWhatWorks) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      decoder_config_from_hf_json(text, "dir/config.json");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string base = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "vocab_size": 100)";
  const std::string llama = R"({"model_type": "llama", "rope_theta": 10000.0, )" + base;
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  std::string e = error_of(R"({"model_type": "falcon", )" + base + "}");
  EXPECT_TRUE(has(e, "dir/config.json") && has(e, "falcon") &&
              has(e, "llama, mistral, qwen2, qwen3, gemma3_text, gemma3, phi3"))
      << e;
  e = error_of(R"({"model_type": "llama", "hidden_size": 64})");
  EXPECT_TRUE(has(e, "missing \"intermediate_size\"")) << e;
  e = error_of(llama + R"(, "num_key_value_heads": 3})");
  EXPECT_TRUE(has(e, "num_key_value_heads (3)")) << e;
  // RoPE: never a default; the two spellings must agree; unknown kinds named.
  e = error_of(R"({"model_type": "llama", )" + base + "}");
  EXPECT_TRUE(has(e, "\"rope_theta\"") && has(e, "\"rope_parameters\"")) << e;
  e = error_of(llama + R"(, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}})");
  EXPECT_TRUE(has(e, "disagree")) << e;
  e = error_of(llama + R"(, "rope_scaling": {"type": "yarn", "factor": 4}})");
  EXPECT_TRUE(has(e, "\"yarn\"") && has(e, "llama3") && has(e, "linear")) << e;
  e = error_of(llama + R"(, "rope_scaling": {"type": "longrope", "long_factor": [1.0]}})");
  EXPECT_TRUE(has(e, "\"longrope\"")) << e;
  e = error_of(llama + R"(, "partial_rotary_factor": 0.75})");
  EXPECT_TRUE(has(e, "partial_rotary_factor 0.75")) << e;
  e = error_of(llama + R"(, "attn_logit_softcapping": 50.0})");
  EXPECT_TRUE(has(e, "attn_logit_softcapping 50.0")) << e;
  e = error_of(llama + R"(, "final_logit_softcapping": 30.0})");
  EXPECT_TRUE(has(e, "final_logit_softcapping 30.0")) << e;
  e = error_of(llama + R"(, "use_bidirectional_attention": true})");
  EXPECT_TRUE(has(e, "use_bidirectional_attention")) << e;
  e = error_of(llama + R"(, "layer_types": ["full_attention", "chunked_attention"]})");
  EXPECT_TRUE(has(e, "\"chunked_attention\"") && has(e, "sliding_attention")) << e;
  e = error_of(llama + R"(, "layer_types": ["full_attention"]})");
  EXPECT_TRUE(has(e, "layer_types lists 1 layers")) << e;
  e = error_of(llama + R"(, "hidden_act": "gelu"})");
  EXPECT_TRUE(has(e, "hidden_act \"gelu\"") && has(e, "gelu_pytorch_tanh")) << e;
  e = error_of(R"({"model_type": "gemma3_text", "hidden_activation": "relu", )" + base + "}");
  EXPECT_TRUE(has(e, "hidden_activation \"relu\"")) << e;
  e = error_of(llama + R"(, "attention_dropout": 0.1})");
  EXPECT_TRUE(has(e, "attention_dropout 0.1") && has(e, "without dropout")) << e;
  e = error_of(llama + R"(, "pad_token_id": 100})");
  EXPECT_TRUE(has(e, "pad_token_id")) << e;
  e = error_of(R"({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"]})");
  EXPECT_TRUE(has(e, "text_config")) << e;
  e = error_of(llama + R"(, "vocab_size": "big"})");
  EXPECT_TRUE(has(e, "\"vocab_size\" must be a positive integer")) << e;
  EXPECT_TRUE(has(error_of("{not json"), "not valid JSON"));
}

// Mixtures of experts pstar does not implement are refused by key and value: each would train
// another model than the file's.
TEST(HfDecoderConfigTest, MoeRoutingPstarDoesNotImplementIsRefused) {
  const std::string qwen3_moe = R"({"model_type": "qwen3_moe", "rope_theta": 1e6,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100, "num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32)";
  auto error_of = [&](const std::string& extra) -> std::string {
    try {
      decoder_config_from_hf_json(qwen3_moe + extra + "}", "moe/config.json");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of(""), "no error");
  EXPECT_EQ(error_of(R"(, "router_jitter_noise": 0.0)"), "no error");
  for (const auto& [extra, part] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "shared_expert_intermediate_size": 256)", "shared_expert_intermediate_size 256"},
           {R"(, "n_shared_experts": 1)", "n_shared_experts 1"},
           {R"(, "router_jitter_noise": 0.01)", "router_jitter_noise 0.01"},
           {R"(, "capacity_factor": 1.25)", "capacity_factor 1.25"},
           {R"(, "scoring_func": "sigmoid")", "scoring_func \"sigmoid\""},
           {R"(, "topk_method": "noaux_tc")", "topk_method \"noaux_tc\""},
           {R"(, "num_experts_per_tok": 9)", "num_experts_per_tok 9"},
           {R"(, "mlp_only_layers": [5])", "mlp_only_layers entry 5"},
           {R"(, "router_aux_loss_coef": -1)", "router_aux_loss_coef"}}) {
    const std::string e = error_of(extra);
    EXPECT_NE(e.find("moe/config.json"), std::string::npos) << e;
    EXPECT_NE(e.find(part), std::string::npos) << extra << ": " << e;
  }
}

}  // namespace
}  // namespace pstar::model
