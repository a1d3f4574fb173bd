// The Llama family through the trainer and both engines, as tests/engine/engine/chunked_engine_test
// does for the GPT: the chunk engine against the torch engine, tight budgets bit-identical to an
// unconstrained run, exact resume, and a Hugging Face folder in model.init_from.
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/step_losses.h"
#include "pstar/checkpoint/store.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/model/decoder.h"
#include "pstar/train/trainer.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::train {
namespace {

using engine::ChunkedEngine;
using pstar::testing::cpu_plan;

class LlamaTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }

  // llama-tiny (GQA 4/2, llama3 rope, untied head) with byte tokens and small chunks, so that a
  // few MiB of device memory force moves.
  config::TrainConfig tiny(const std::string& mode = "chunked") const {
    config::TrainConfig c;
    c.model.preset = "llama-tiny";
    c.model.seq_len = 32;
    c.data.text = corpus_;
    c.train_micro_batch_size_per_gpu = 4;
    c.optimizer.lr = 3e-3;
    c.training.steps = 12;
    c.training.lr_schedule.type = "constant";
    c.gradient_clipping = 1.0;
    c.default_chunk_size = 20000;
    c.engine.mode = config::engine_mode_from_name(mode);
    return c;
  }

  std::vector<StepMetrics> run(const config::TrainConfig& c, ChunkedEngine** engine_out = nullptr,
                               std::unique_ptr<Trainer>* keep = nullptr,
                               const std::string& resume = "") {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    o.resume_dir = resume;
    auto built = build_model_and_engine(cpu_plan(c));
    EXPECT_NE(dynamic_cast<model::Decoder*>(built.model.get()), nullptr);
    if (engine_out) *engine_out = dynamic_cast<ChunkedEngine*>(built.engine.get());
    auto trainer = std::make_unique<Trainer>(c, std::move(built), o);
    std::vector<StepMetrics> out;
    while (trainer->steps_done() < c.training.steps) out.push_back(trainer->step());
    if (keep) *keep = std::move(trainer);
    return out;
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

using pstar::testing::losses;

// Note [chunk sizes]: the untied embedding and LM head (256 x 64 each) beside chunks of 3000
// elements get chunks of their own, like Llama-3's 128256 x 4096 beside 64Mi-element chunks; the
// engine matches the torch engine and a tight budget changes no loss.
TEST_F(LlamaTrainingTest, AnOversizedEmbeddingAndHeadGetChunksOfTheirOwn) {
  auto c = tiny();
  c.default_chunk_size = 3000;
  c.use_cpu_embedding = config::OnOffAuto::kOff;
  c.training.steps = 6;
  ChunkedEngine* engine = nullptr;
  std::unique_ptr<Trainer> keep;
  const auto free_run = run(c, &engine, &keep);
  const std::vector<int64_t> sizes = engine->chunk_sizes();
  const int64_t ordinary = engine->chunk_size();
  std::vector<int64_t> own;
  for (int64_t size : sizes)
    if (size > ordinary) own.push_back(size);
  EXPECT_EQ(own.size(), 2u) << "the embedding and the LM head";
  for (int64_t size : own) EXPECT_GE(size, 256 * 64);
  const int64_t per = engine->compute_chunk_bytes() / ordinary;
  int64_t non_model = 0;
  for (int64_t b : engine->trace().non_model_bytes) non_model = std::max(non_model, b);
  const int64_t largest_moment = engine->largest_working_set_bytes();
  keep.reset();
  auto tight = c;
  tight.engine.device_memory = non_model + largest_moment + 2 * ordinary * per;
  const auto budgeted = run(tight, &engine, &keep);
  EXPECT_EQ(losses(budgeted), losses(free_run));
  int64_t moved = 0;
  for (const auto& m : budgeted) moved += m.engine.moved_h2d_bytes;
  EXPECT_GT(moved, 0);
  keep.reset();
  c.engine.mode = config::EngineMode::kTorch;
  const auto reference = run(c);
  for (size_t i = 0; i < reference.size(); ++i)
    EXPECT_NEAR(free_run[i].loss, reference[i].loss, 1e-5 * reference[i].loss) << "step " << i + 1;
}

TEST_F(LlamaTrainingTest, Fp32ChunkEngineMatchesTheTorchEngineAfterAdamSteps) {
  auto c = tiny();
  auto chunked = run(c);
  c.engine.mode = config::EngineMode::kTorch;
  auto reference = run(c);
  ASSERT_EQ(chunked.size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_NEAR(chunked[i].loss, reference[i].loss, 1e-5 * reference[i].loss) << "step " << i + 1;
    EXPECT_NEAR(chunked[i].grad_norm, reference[i].grad_norm, 1e-4 * reference[i].grad_norm);
  }
  EXPECT_LT(chunked.back().loss, 0.8 * chunked.front().loss);
}

TEST_F(LlamaTrainingTest, Bf16ConvergesAndTightBudgetsAreBitIdentical) {
  auto c = tiny();
  c.bf16.enabled = config::OnOffAuto::kOn;
  ChunkedEngine* engine = nullptr;
  std::unique_ptr<Trainer> keep;
  const auto free_run = run(c, &engine, &keep);
  EXPECT_LT(free_run.back().loss, 0.8 * free_run.front().loss);
  int64_t non_model = 0;
  for (int64_t b : engine->trace().non_model_bytes) non_model = std::max(non_model, b);
  // The start-up fit checks the predicted peak, which LibTorch 2.x's smaller measured one (1.42
  // MiB against 1.57 predicted, LibTorch 2.11 on the CPU) can fall below: room for both.
  non_model = std::max(non_model, engine->fit().device_non_model);
  const int64_t chunk_bytes = engine->compute_chunk_bytes();
  const int64_t num_chunks = engine->num_chunks();
  keep.reset();
  c.engine.device_memory = non_model + 3 * chunk_bytes + chunk_bytes / 2;
  const auto tight = run(c, &engine, &keep);
  EXPECT_EQ(losses(tight), losses(free_run));
  EXPECT_LT(engine->margin_chunks(), num_chunks);
  int64_t moved = 0;
  for (const auto& m : tight) {
    EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
    moved += m.engine.moved_h2d_bytes;
  }
  EXPECT_GT(moved, 0);
}

TEST_F(LlamaTrainingTest, ResumeIsBitIdentical) {
  auto c = tiny();
  c.bf16.enabled = config::OnOffAuto::kOn;
  c.training.steps = 8;
  const auto full = run(c);
  c.training.save_dir = dir_.file("ckpt");
  c.training.save_interval = 4;
  c.training.steps = 4;
  run(c);
  c.training.steps = 8;
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  o.resume_dir = checkpoint::checkpoint_dir(c.training.save_dir, 4);
  Trainer resumed(c, build_model_and_engine(cpu_plan(c)), o);
  ASSERT_EQ(resumed.steps_done(), 4);
  for (int64_t s = 5; s <= 8; ++s) {
    const auto m = resumed.step();
    EXPECT_EQ(m.loss, full[s - 1].loss) << "step " << s;
    EXPECT_EQ(m.grad_norm, full[s - 1].grad_norm) << "step " << s;
  }
}

TEST_F(LlamaTrainingTest, AFolderInInitFromTrainsInBothEnginesFromTheSameWeights) {
  const std::string python = pstar::testing::python_with_torch();
  if (python.empty())
    GTEST_SKIP() << "no Python with torch (python3 -c 'import torch' fails; Debian: "
                    "apt-get install python3-torch)";
  const std::string folder = dir_.file("tiny-llama");
  const std::string command = python + " " + PSTAR_SOURCE_DIR +
                              "/examples/llama/make_tiny_llama.py --out " + folder +
                              " --shards 2 >/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto c = tiny();
  c.model.preset.clear();
  c.model.init_from = folder;
  c.training.steps = 3;
  const auto chunked = run(c);
  c.engine.mode = config::EngineMode::kTorch;
  const auto reference = run(c);
  for (size_t i = 0; i < reference.size(); ++i)
    EXPECT_NEAR(chunked[i].loss, reference[i].loss, 1e-5 * reference[i].loss) << "step " << i + 1;
  // The folder's weights, not the seed's: the same shape from the preset, same seed and windows,
  // starts elsewhere.
  c.model.init_from.clear();
  c.model.preset = "llama-tiny";
  c.engine.mode = config::EngineMode::kChunked;
  const auto random_init = run(c);
  EXPECT_NE(random_init[0].loss, chunked[0].loss);
}

}  // namespace
}  // namespace pstar::train
