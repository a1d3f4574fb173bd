// The held-out loss (docs/training.md#held-out-loss): evaluation changes nothing of training
// (losses, the engine's moves and the checkpoint's bytes are those of a run without it, with the
// chunk engine under a tight budget and through its warm-up), and it is deterministic.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu_plan.h"
#include "pstar/base/error.h"
#include "pstar/checkpoint/store.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/engine/param_engine.h"
#include "pstar/formats/config.h"
#include "pstar/train/metrics.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

namespace fs = std::filesystem;

struct RunRecord {
  std::vector<StepMetrics> steps;
  std::string checkpoint;  // the last checkpoint's shard file, its bytes
  // The chunk engine's plan: the warm-up trace it was made from, and the margin.
  chunk::AccessTrace trace;
  int64_t margin = -1;
};

class EvaluateTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
    held_out_ = dir_.file("held-out.txt");
    pstar::testing::write_text(held_out_, pstar::testing::repetitive_corpus(40) + "Xyz q!");
  }

  config::TrainConfig small_config() const {
    config::TrainConfig c;
    c.model.hidden = 64;
    c.model.layers = 2;
    c.model.heads = 4;
    c.model.vocab_size = 256;
    c.model.seq_len = 32;
    c.data.text = corpus_;
    c.train_micro_batch_size_per_gpu = 3;
    c.optimizer.lr = 3e-3;
    c.training.steps = 7;
    c.training.lr_schedule.type = "cosine";
    c.training.lr_schedule.warmup_steps = 2;
    c.default_chunk_size = 20000;
    c.engine.mode = config::engine_mode_from_name(GetParam());
    // Tight: chunks move every step, and the evaluation must bring its own to the device.
    c.engine.device_memory = 3 << 20;
    c.engine.warmup_iterations = 2;  // evaluations fall inside the warm-up too
    c.training.save_interval = 7;
    return c;
  }

  static TrainOptions options() {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    return o;
  }

  RunRecord run(config::TrainConfig c, const std::string& name) {
    c.training.save_dir = dir_.file(name);
    ModelAndEngine built = build_model_and_engine(pstar::testing::cpu_plan(c));
    const auto* chunked = dynamic_cast<const engine::ChunkedEngine*>(built.engine.get());
    Trainer t(c, std::move(built), options());
    RunRecord out;
    while (t.steps_done() < c.training.steps) out.steps.push_back(t.step());
    if (chunked != nullptr) {
      out.trace = chunked->trace();
      out.margin = chunked->margin_chunks();
    }
    out.checkpoint = pstar::testing::read_text(
        (fs::path(c.training.save_dir) / "step-00000007" / "ckpt-0.pt").string());
    return out;
  }

  static void expect_same_training(const RunRecord& with, const RunRecord& without) {
    ASSERT_EQ(with.steps.size(), without.steps.size());
    for (size_t i = 0; i < with.steps.size(); ++i) {
      const StepMetrics& a = with.steps[i];
      const StepMetrics& b = without.steps[i];
      EXPECT_EQ(a.loss, b.loss) << "step " << a.step;  // bit for bit
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << a.step;
      // The same places: the evaluation's moves are not the step's, and the plan is unchanged.
      EXPECT_EQ(a.engine.moved_h2d_bytes, b.engine.moved_h2d_bytes) << "step " << a.step;
      EXPECT_EQ(a.engine.moved_d2h_bytes, b.engine.moved_d2h_bytes) << "step " << a.step;
      EXPECT_EQ(a.engine.device_peak_bytes, b.engine.device_peak_bytes) << "step " << a.step;
      EXPECT_EQ(a.engine.adam.device_chunks, b.engine.adam.device_chunks) << "step " << a.step;
    }
    // The plan: the same accesses at every moment, the same non-model peaks, the same margin.
    EXPECT_EQ(with.trace.accesses, without.trace.accesses);
    EXPECT_EQ(with.trace.non_model_bytes, without.trace.non_model_bytes);
    EXPECT_EQ(with.margin, without.margin);
    EXPECT_FALSE(with.checkpoint.empty());
    EXPECT_TRUE(with.checkpoint == without.checkpoint) << "the checkpoints' bytes differ";
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_, held_out_;
};

TEST_P(EvaluateTest, ASecondSourceEveryStepChangesNothingOfTraining) {
  config::TrainConfig c = small_config();
  if (c.engine.mode == config::EngineMode::kChunked) {
    // bf16 as well: each chunk's bf16 copy must be the one its master rounds to after the moves.
    config::TrainConfig b = c;
    b.bf16.enabled = config::OnOffAuto::kOn;
    const RunRecord without = run(b, "bf16-without");
    ASSERT_GT(without.trace.num_moments(), 0);
    EXPECT_LT(without.margin, 7) << "the budget must leave chunks to move";
    b.data.eval.text = held_out_;
    b.training.eval_interval = 1;
    expect_same_training(run(b, "bf16-with"), without);
  }
  const RunRecord without = run(c, "without");
  c.data.eval.text = held_out_;
  c.training.eval_interval = 1;
  c.training.eval_batches = 3;
  const RunRecord with = run(c, "with");
  expect_same_training(with, without);
  for (const StepMetrics& m : with.steps) {
    ASSERT_TRUE(m.eval_loss.has_value()) << "step " << m.step;
    EXPECT_TRUE(std::isfinite(*m.eval_loss));
  }
  for (const StepMetrics& m : without.steps) EXPECT_FALSE(m.eval_loss.has_value());
  // The held-out loss follows training: it falls from about ln(256).
  EXPECT_NEAR(*with.steps.front().eval_loss, std::log(256.0), 0.5);
  EXPECT_LT(*with.steps.back().eval_loss, *with.steps.front().eval_loss - 0.2);
}

// data.eval_fraction: training on its first part is training on a file that holds only that part.
TEST_P(EvaluateTest, AHeldOutFractionTrainsLikeTheTruncatedSource) {
  config::TrainConfig c = small_config();
  const std::string text = pstar::testing::read_text(corpus_);
  const auto held = static_cast<size_t>(std::floor(0.2 * static_cast<double>(text.size())));
  const std::string kept = dir_.file("kept.txt");
  pstar::testing::write_text(kept, text.substr(0, text.size() - held));
  c.data.text = kept;
  const RunRecord without = run(c, "truncated");
  c.data.text = corpus_;
  c.data.eval_fraction = 0.2;
  c.training.eval_interval = 3;
  const RunRecord with = run(c, "fraction");
  expect_same_training(with, without);
  for (const StepMetrics& m : with.steps)
    EXPECT_EQ(m.eval_loss.has_value(), m.step % 3 == 0 || m.step == 7) << "step " << m.step;
}

// The same windows every time: two evaluations of the same model agree bit for bit, the last
// step's logged value is the model's after that step, and a fresh trainer resumed from its
// checkpoint computes it again.
TEST_P(EvaluateTest, DeterministicAndReproducedFromTheCheckpoint) {
  config::TrainConfig c = small_config();
  c.data.eval.text = held_out_;
  c.training.save_dir = dir_.file("ck");
  double logged = 0;
  {
    Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)), options());
    StepMetrics last;
    while (t.steps_done() < c.training.steps) last = t.step();
    ASSERT_TRUE(last.eval_loss.has_value());
    logged = *last.eval_loss;
    EXPECT_EQ(t.evaluate(), logged);
    EXPECT_EQ(t.evaluate(), logged);
    EXPECT_EQ(t.eval_windows(), 8 * 3);
  }
  TrainOptions o = options();
  o.resume_dir = c.training.save_dir;
  Trainer resumed(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
  EXPECT_EQ(resumed.steps_done(), 7);
  EXPECT_EQ(resumed.evaluate(), logged);
}

TEST_P(EvaluateTest, NoHeldOutDataIsAConfigError) {
  config::TrainConfig c = small_config();
  Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)), options());
  EXPECT_EQ(t.eval_windows(), 0);
  const std::string message = pstar::testing::message_of<ConfigError>([&] { t.evaluate(); });
  EXPECT_NE(message.find("no held-out data to evaluate: set data.eval"), std::string::npos)
      << message;
}

INSTANTIATE_TEST_SUITE_P(Engines, EvaluateTest, ::testing::Values("chunked", "torch"));

}  // namespace
}  // namespace pstar::train
