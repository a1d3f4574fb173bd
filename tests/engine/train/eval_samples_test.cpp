// training.eval_samples (docs/training.md#samples): the greedy completions of a few prompts go into
// the step lines of the evaluated steps, change nothing of training (losses bit-identical to a run
// without them), and are the same under the chunk engine (its evaluation hooks fetching each
// module for the cached forwards, under a budget that moves chunks) as under plain LibTorch.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu_plan.h"
#include "engine/small_gpt_config.h"
#include "pstar/base/error.h"
#include "pstar/engine/param_engine.h"
#include "pstar/formats/config.h"
#include "pstar/train/metrics.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

class EvalSamplesTest : public ::testing::TestWithParam<const char*> {
 protected:
  // A byte-level model (data.text without a tokenizer) of the parameter's family, on the chunk
  // engine's test GPT set-up (chunks move every step under the budget).
  config::TrainConfig small_config(const std::string& mode) const {
    config::TrainConfig c = pstar::testing::small_gpt_config_in(dir_, mode);
    if (std::string(GetParam()) == "decoder") {
      c.model.hidden.reset();
      c.model.layers.reset();
      c.model.heads.reset();
      c.model.preset = "llama-tiny";
    }
    c.train_micro_batch_size_per_gpu = 2;
    c.training.steps = 5;
    c.engine.device_memory = 3 << 20;
    return c;
  }

  static std::vector<StepMetrics> run(const config::TrainConfig& c) {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
    std::vector<StepMetrics> steps;
    while (t.steps_done() < c.training.steps) steps.push_back(t.step());
    return steps;
  }

  pstar::testing::ScratchDir dir_;
};

TEST_P(EvalSamplesTest, CompletionsAtEachEvaluationChangeNothingOfTraining) {
  config::TrainConfig with = small_config("chunked");
  with.training.eval_samples = {R"({"prompt": "The "})", R"({"prompt": "ab"})"};
  with.training.eval_sample_tokens = 6;
  with.training.eval_interval = 2;
  const auto chunked = run(with);
  const auto plain = run(small_config("chunked"));
  config::TrainConfig torch_engine = with;
  torch_engine.engine.mode = config::EngineMode::kTorch;
  const auto reference = run(torch_engine);
  ASSERT_EQ(chunked.size(), plain.size());
  for (size_t i = 0; i < chunked.size(); ++i) {
    const int64_t step = chunked[i].step;
    EXPECT_EQ(chunked[i].loss, plain[i].loss) << "step " << step;  // bit for bit
    EXPECT_EQ(chunked[i].eval_samples.size(), step % 2 == 0 || step == 5 ? 2U : 0U) << step;
    ASSERT_EQ(chunked[i].eval_samples.size(), reference[i].eval_samples.size());
    for (size_t s = 0; s < chunked[i].eval_samples.size(); ++s) {
      EXPECT_EQ(chunked[i].eval_samples[s].prompt, s == 0 ? "The " : "ab");
      EXPECT_FALSE(chunked[i].eval_samples[s].completion.empty());
      EXPECT_EQ(chunked[i].eval_samples[s].completion, reference[i].eval_samples[s].completion)
          << "step " << step << ", sample " << s << ": the chunk engine against LibTorch";
    }
  }
}

TEST_P(EvalSamplesTest, APromptLongerThanTheContextIsAnError) {
  config::TrainConfig c = small_config("torch");
  c.training.eval_samples = {R"({"prompt": "fine"})",
                             R"({"prompt": ")" + std::string(5000, 'x') + R"("})"};
  try {
    run(c);
    ADD_FAILURE() << "a sample longer than the context was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("training.eval_samples[1] is 5000 tokens long"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EvalSamplesTest, ::testing::Values("gpt", "decoder"));

}  // namespace
}  // namespace pstar::train
