// Graceful stops (Note [graceful stop]): a stop requested between steps or between micro-batches
// ends Trainer::run with a checkpoint from which the run continues bit-identically.
#include <csignal>
#include <filesystem>

#include <gtest/gtest.h>

#include "engine/cpu_plan.h"
#include "pstar/checkpoint/store.h"
#include "pstar/core/stop.h"
#include "pstar/engine/param_engine.h"
#include "pstar/formats/config.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

class StopTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }
  void TearDown() override { core::request_stop(0); }

  config::TrainConfig small_config() const {
    config::TrainConfig c;
    c.model.hidden = 64;
    c.model.layers = 2;
    c.model.heads = 4;
    c.model.vocab_size = 256;
    c.model.seq_len = 32;
    c.data.text = corpus_;
    c.data.sampling = "random";  // the sampler's position must survive the stop too
    c.train_micro_batch_size_per_gpu = 2;
    c.gradient_accumulation_steps = 3;
    c.optimizer.lr = 3e-3;
    c.training.steps = 6;
    c.training.lr_schedule.type = "cosine";
    c.training.lr_schedule.warmup_steps = 2;
    c.default_chunk_size = 20000;
    c.engine.mode = config::engine_mode_from_name(GetParam());
    c.engine.device_memory = 3 << 20;  // chunks move, so the engine is mid-flight when stopped
    return c;
  }

  static TrainOptions options(double abandon_after_s = 10.0) {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    o.abandon_step_after_s = abandon_after_s;
    return o;
  }

  std::vector<double> reference_losses(const config::TrainConfig& c) {
    Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)), options());
    std::vector<double> out;
    while (t.steps_done() < c.training.steps) out.push_back(t.step().loss);
    return out;
  }

  // Resumes from save_dir and checks steps from..training.steps against the reference.
  void expect_exact_continuation(const config::TrainConfig& c, int64_t from,
                                 const std::vector<double>& reference) {
    TrainOptions o = options();
    o.resume_dir = c.training.save_dir;
    Trainer resumed(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
    ASSERT_EQ(resumed.steps_done(), from - 1);
    for (int64_t s = from; s <= c.training.steps; ++s)
      EXPECT_EQ(resumed.step().loss, reference[static_cast<size_t>(s - 1)]) << "step " << s;
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

TEST_P(StopTest, BetweenStepsFinishesTheStepAndSaves) {
  auto c = small_config();
  const auto reference = reference_losses(c);
  c.training.save_dir = dir_.file("ck");
  c.training.save_interval = 0;  // the stop's checkpoint is the only one
  {
    Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)), options());
    t.step();
    t.step();
    core::request_stop(SIGTERM);
    // A short step (well under the 10 s default) is finished, then the run stops.
    const TrainSummary summary = t.run();
    EXPECT_EQ(summary.stop_signal, SIGTERM);
    EXPECT_EQ(summary.steps, 1);
    EXPECT_EQ(t.steps_done(), 3);
  }
  core::request_stop(0);
  EXPECT_EQ(checkpoint::resolve_resume_dir(c.training.save_dir).dir,
            checkpoint::checkpoint_dir(c.training.save_dir, 3));
  EXPECT_EQ(checkpoint::checkpoint_problem(checkpoint::checkpoint_dir(c.training.save_dir, 3)), "");
  expect_exact_continuation(c, 4, reference);
}

TEST_P(StopTest, BetweenMicroBatchesAbandonsALongStep) {
  auto c = small_config();
  const auto reference = reference_losses(c);
  c.training.save_dir = dir_.file("ck");
  c.training.save_interval = 0;
  {
    // Any rest of a step counts as long: the stop abandons step 3 after its first micro-batch.
    Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)),
              options(/*abandon_after_s=*/0.0));
    t.step();
    t.step();
    core::request_stop(SIGINT);
    const TrainSummary summary = t.run();
    EXPECT_EQ(summary.stop_signal, SIGINT);
    EXPECT_EQ(summary.steps, 0);
    EXPECT_EQ(t.steps_done(), 2);
  }
  core::request_stop(0);
  EXPECT_EQ(checkpoint::resolve_resume_dir(c.training.save_dir).dir,
            checkpoint::checkpoint_dir(c.training.save_dir, 2));
  // Nothing of the abandoned micro-batch reaches the checkpoint: masters, Adam state, counters
  // and the random state are those of the end of step 2.
  expect_exact_continuation(c, 3, reference);
}

TEST_P(StopTest, WithoutASaveDirStopsWithoutACheckpoint) {
  auto c = small_config();
  Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)), options());
  core::request_stop(SIGTERM);
  const TrainSummary summary = t.run();
  EXPECT_EQ(summary.stop_signal, SIGTERM);
  EXPECT_EQ(t.steps_done(), 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, StopTest, ::testing::Values("chunked", "torch"));

}  // namespace
}  // namespace pstar::train
