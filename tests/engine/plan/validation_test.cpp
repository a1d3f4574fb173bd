// The estimator against real runs of the chunk engine on the emulated device tier: the largest
// predicted model trains, a model ~15% larger is refused at start-up by the engine's own fit
// check, and the predicted non-model peak is within 15% of the one the warm-up measures. For the
// GPT and for decoder shapes (grouped-query attention or not, tied or untied head; Llama, Gemma 3
// and Qwen3 layers).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "engine/cpu_plan.h"
#include "pstar/base/error.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/family.h"
#include "pstar/model/hf_decoder_config.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::plan {
namespace {

struct Case {
  const char* name;
  int64_t hidden, heads, seq, micro_batch;
  bool bf16, checkpointing;
  int64_t device_mib, host_mib;
};

class EstimateValidationTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }

  config::TrainConfig config_for(const Case& c, int64_t layers) const {
    config::TrainConfig t;
    t.model.hidden = c.hidden;
    t.model.layers = layers;
    t.model.heads = c.heads;
    t.model.vocab_size = 256;
    t.model.seq_len = c.seq;
    t.data.text = corpus_;
    t.train_micro_batch_size_per_gpu = c.micro_batch;
    t.bf16.enabled = config::on_off(c.bf16);
    t.optimizer.lr = 1e-3;
    t.training.steps = 3;
    t.training.lr_schedule.type = "constant";
    t.default_chunk_size = 1 << 16;
    t.engine.mode = config::EngineMode::kChunked;
    t.engine.activation_checkpointing = c.checkpointing;
    t.engine.device_memory = c.device_mib << 20;
    t.engine.host_memory = c.host_mib << 20;
    return t;
  }

  static model::ModelShape shape_of(const config::TrainConfig& t) {
    return model::resolve_model_shape(t.model);
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

TEST_P(EstimateValidationTest, PredictionMatchesTheEngine) {
  const Case& c = GetParam();
  const auto probe = config_for(c, 1);
  const Workload w = workload_for(resolve_run(probe, RunFacts{}), shape_of(probe));
  const int64_t device = c.device_mib << 20, host = c.host_mib << 20;
  const int64_t layers = max_layers_budgets(device, host, w, c.hidden, c.heads);
  ASSERT_GE(layers, 2) << "the case's budgets should hold a few layers";
  const Evaluation predicted = evaluate_budgets(device, host, w, c.hidden, layers, c.heads);
  ASSERT_TRUE(predicted.fit.fits);

  // The largest predicted model trains, and the engine's start-up fit is the estimator's.
  const auto config = config_for(c, layers);
  auto built = train::build_model_and_engine(pstar::testing::cpu_plan(config));
  auto* engine = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->fit().host_chunks, predicted.fit.host_chunks);
  EXPECT_EQ(engine->fit().device_chunks, predicted.fit.device_chunks);
  EXPECT_EQ(engine->fit().device_used, predicted.fit.device_used);
  train::TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  train::Trainer trainer(config, std::move(built), o);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isfinite(trainer.step().loss));

  // The activation model against the warm-up's measured non-model peak.
  const auto& nm = engine->trace().non_model_bytes;
  ASSERT_FALSE(nm.empty());
  const int64_t measured = *std::max_element(nm.begin(), nm.end());
  const int64_t modelled = predicted.activations.peak;
  // Within 15% below (a model that under-predicts lets a plan overrun the device) and 25% above:
  // LibTorch 2.11's CPU kernels keep less than 1.13's (the bf16, tied, GQA case measured 19.05
  // MiB against 22.96 predicted, +20.5%, where 1.13 is within 15%), and an over-prediction only
  // leaves memory unused.
  EXPECT_GE(static_cast<double>(modelled), 0.85 * static_cast<double>(measured));
  EXPECT_LE(static_cast<double>(modelled), 1.25 * static_cast<double>(measured));

  // About 15% more parameters: refused at start-up, before any chunk is allocated.
  int64_t bigger = layers + 1;
  auto params_at = [&](int64_t l) { return shape_of(config_for(c, l)).num_params(); };
  while (params_at(bigger) < 1.15 * static_cast<double>(predicted.params)) ++bigger;
  const auto too_big = config_for(c, bigger);
  std::printf(
      "[validation] %s: %lld layers (%lld params), %lld chunks on the host, %lld on the "
      "device; %lld layers (%lld params) refused; non-model predicted %.2f MiB, measured %.2f MiB "
      "(%+.1f%%)\n",
      c.name, static_cast<long long>(layers), static_cast<long long>(predicted.params),
      static_cast<long long>(predicted.fit.host_chunks),
      static_cast<long long>(predicted.fit.device_chunks), static_cast<long long>(bigger),
      static_cast<long long>(params_at(bigger)), modelled / 1048576.0, measured / 1048576.0,
      100.0 * (static_cast<double>(modelled) / measured - 1));

  try {
    train::build_model_and_engine(pstar::testing::cpu_plan(too_big));
    FAIL() << c.name << ": " << bigger << " layers were accepted";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("pstar estimate"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Budgets, EstimateValidationTest,
    ::testing::Values(Case{"bf16", 128, 4, 64, 8, true, false, 48, 24},
                      Case{"bf16_checkpointing", 192, 6, 128, 8, true, true, 48, 32},
                      Case{"fp32", 96, 4, 64, 4, false, false, 40, 16}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// ---- the Llama family -------------------------------------------------------------------------

struct LlamaCase {
  const char* name;
  int64_t hidden, heads, kv_heads, intermediate;
  bool tied;
  int64_t seq, micro_batch;
  bool bf16, checkpointing;
  int64_t device_mib, host_mib;
  const char* family = "llama";  // a decoder family's row (model/family.h)
};

// Configs name the shape through model.init_from: a Hugging Face folder is how a config gives a
// Llama its key/value heads, SwiGLU width and head tying. Each depth gets its own folder.
class LlamaEstimateValidationTest : public ::testing::TestWithParam<LlamaCase> {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }

  static model::DecoderConfig shape(const LlamaCase& c, int64_t layers) {
    // The family's switches (Gemma 3: four (1 + w) norms, q/k norms, tanh-GELU, a sliding window
    // on five layers of six), at the case's shape.
    model::DecoderConfig m = model::family_defaults(*model::find_decoder_family(c.family));
    m.hidden = c.hidden;
    m.heads = c.heads;
    m.kv_heads = c.kv_heads;
    m.head_dim = c.hidden / c.heads;
    m.intermediate = c.intermediate;
    m.layers = layers;
    m.vocab_size = 256;  // byte tokens
    m.max_positions = 512;
    m.seq_len = c.seq;
    m.attention.rope[0].theta = m.attention.rope[1].theta = 10000;
    m.tie_word_embeddings = c.tied;
    return m;
  }

  std::string folder(const LlamaCase& c, int64_t layers) {
    const std::string dir = dir_.file(str_cat("llama-", layers));
    if (std::filesystem::exists(dir)) return dir;
    std::filesystem::create_directories(dir);
    const model::DecoderConfig m = shape(c, layers);
    pstar::testing::write_text(dir + "/config.json",
                               model::decoder_config_to_hf_json(m, "float32"));
    formats::SafetensorsWriter writer;
    torch::manual_seed(layers);
    for (const auto& p : model::decoder_parameter_shapes(m)) {
      const bool norm = p.name.find("norm") != std::string::npos;
      const auto value = norm ? torch::ones(p.shape) : 0.02 * torch::randn(p.shape);
      writer.add(p.name, formats::DType::kF32, p.shape, value.data_ptr(), value.nbytes());
    }
    writer.write(dir + "/model.safetensors");
    return dir;
  }

  config::TrainConfig config_for(const LlamaCase& c, int64_t layers) {
    config::TrainConfig t;
    t.model.init_from = folder(c, layers);
    t.model.seq_len = c.seq;
    t.data.text = corpus_;
    t.train_micro_batch_size_per_gpu = c.micro_batch;
    t.bf16.enabled = config::on_off(c.bf16);
    t.optimizer.lr = 1e-3;
    t.training.steps = 3;
    t.training.lr_schedule.type = "constant";
    t.default_chunk_size = 1 << 16;
    t.engine.mode = config::EngineMode::kChunked;
    t.engine.activation_checkpointing = c.checkpointing;
    t.engine.device_memory = c.device_mib << 20;
    t.engine.host_memory = c.host_mib << 20;
    return t;
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

TEST_P(LlamaEstimateValidationTest, PredictionMatchesTheEngine) {
  const LlamaCase& c = GetParam();
  const auto probe = config_for(c, 1);
  const Workload w =
      workload_for(resolve_run(probe, RunFacts{}), model::resolve_model_shape(probe.model));
  const int64_t device = c.device_mib << 20, host = c.host_mib << 20;
  auto at_depth = [&](int64_t layers) {
    model::ModelShape s;
    s.family = model::ModelFamily::kDecoder;
    s.decoder = shape(c, layers);
    return s;
  };
  const int64_t layers = max_layers_budgets(device, host, w, at_depth, 64);
  ASSERT_GE(layers, 2) << "the case's budgets should hold a few layers";
  ASSERT_LT(layers, 64) << "the case's budgets should bind";
  const Evaluation predicted = evaluate_budgets(device, host, w, at_depth(layers));
  ASSERT_TRUE(predicted.fit.fits);

  // The largest predicted model trains, and the engine's start-up fit is the estimator's.
  const auto config = config_for(c, layers);
  EXPECT_EQ(model::resolve_model_shape(config.model).num_params(), predicted.params);
  auto built = train::build_model_and_engine(pstar::testing::cpu_plan(config));
  auto* engine = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->fit().host_chunks, predicted.fit.host_chunks);
  EXPECT_EQ(engine->fit().device_chunks, predicted.fit.device_chunks);
  EXPECT_EQ(engine->fit().device_used, predicted.fit.device_used);
  train::TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  train::Trainer trainer(config, std::move(built), o);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isfinite(trainer.step().loss));

  // The Llama activation model against the warm-up's measured non-model peak.
  const auto& nm = engine->trace().non_model_bytes;
  ASSERT_FALSE(nm.empty());
  const int64_t measured = *std::max_element(nm.begin(), nm.end());
  const int64_t modelled = predicted.activations.peak;
  // Within 15% below (a model that under-predicts lets a plan overrun the device) and 25% above:
  // LibTorch 2.11's CPU kernels keep less than 1.13's (the bf16, tied, GQA case measured 19.05
  // MiB against 22.96 predicted, +20.5%, where 1.13 is within 15%), and an over-prediction only
  // leaves memory unused.
  EXPECT_GE(static_cast<double>(modelled), 0.85 * static_cast<double>(measured));
  EXPECT_LE(static_cast<double>(modelled), 1.25 * static_cast<double>(measured));

  // About 15% more parameters: refused at start-up.
  int64_t bigger = layers + 1;
  auto params_at = [&](int64_t l) { return at_depth(l).num_params(); };
  while (params_at(bigger) < 1.15 * static_cast<double>(predicted.params)) ++bigger;
  std::printf(
      "[validation] %s: %lld layers (%lld params), %lld chunks on the host, %lld on the "
      "device; %lld layers (%lld params) refused; non-model predicted %.2f MiB, measured %.2f MiB "
      "(%+.1f%%)\n",
      c.name, static_cast<long long>(layers), static_cast<long long>(predicted.params),
      static_cast<long long>(predicted.fit.host_chunks),
      static_cast<long long>(predicted.fit.device_chunks), static_cast<long long>(bigger),
      static_cast<long long>(params_at(bigger)), modelled / 1048576.0, measured / 1048576.0,
      100.0 * (static_cast<double>(modelled) / measured - 1));
  const auto too_big = config_for(c, bigger);
  try {
    train::build_model_and_engine(pstar::testing::cpu_plan(too_big));
    FAIL() << c.name << ": " << bigger << " layers were accepted";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("pstar estimate"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Budgets, LlamaEstimateValidationTest,
    ::testing::Values(
        LlamaCase{"gqa_untied_bf16", 128, 4, 2, 352, false, 64, 8, true, false, 48, 24},
        LlamaCase{"gqa_tied_bf16_checkpointing", 192, 6, 2, 512, true, 128, 8, true, true, 48, 32},
        LlamaCase{"mha_untied_fp32", 96, 4, 4, 256, false, 64, 4, false, false, 40, 16},
        LlamaCase{"gemma3_tied_bf16", 128, 4, 2, 352, true, 64, 8, true, false, 48, 24,
                  "gemma3_text"},
        LlamaCase{"qwen3_untied_fp32", 96, 4, 2, 256, false, 64, 4, false, false, 40, 16, "qwen3"}),
    [](const ::testing::TestParamInfo<LlamaCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pstar::plan
