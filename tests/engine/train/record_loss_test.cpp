// Training on records (data.jsonl) through the trainer (Note [loss over counted targets]): the
// logged loss of a step is the mean over the counted targets of its whole global batch, computed
// here independently in float64 from the same model and batches, for 1 and 4 micro-batches of
// accumulation (which see the same windows), and its gradient is that loss's; the chunk engine
// agrees with the torch engine and is bit-identical under a tight budget; a global batch with
// nothing counted is skipped and counted; a model without packing is refused with packing on.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "pstar/base/error.h"
#include "pstar/data/training_data.h"
#include "pstar/engine/param_engine.h"
#include "pstar/formats/config.h"
#include "pstar/model/causal_lm.h"
#include "pstar/train/trainer.h"
#include "test_util.h"
#include "text/record_fixtures.h"

namespace pstar::train {
namespace {

// Answers of 1 to 36 words and short prompts: micro-batches count very different numbers of
// targets, so a mean per micro-batch would differ from the global mean.
std::string conversations(int64_t n, bool with_answers = true) {
  const std::vector<std::string> words = {"Paris", "is", "the", "capital", "Hello", "of", "France"};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    std::string answer;
    const int64_t count = 1 + (i * 7) % 36;
    for (int64_t w = 0; w < count; ++w) answer += (w ? " " : "") + words[(i + w) % words.size()];
    nlohmann::json record = {
        {"messages", {{{"role", "user"}, {"content", "question " + std::to_string(i)}}}}};
    if (with_answers) record["messages"].push_back({{"role", "assistant"}, {"content", answer}});
    out += record.dump() + "\n";
  }
  return out;
}

class RecordLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = dir_.file("tok");
    std::filesystem::create_directories(tokenizer_);
    pstar::testing::write_text(tokenizer_ + "/tokenizer.json",
                               text::testing::small_tokenizer_json());
    pstar::testing::write_text(tokenizer_ + "/tokenizer_config.json",
                               text::testing::small_tokenizer_config());
    jsonl_ = dir_.file("conv.jsonl");
    pstar::testing::write_text(jsonl_, conversations(40));
  }

  config::TrainConfig small_config(int64_t micro, int64_t accumulation) const {
    config::TrainConfig c;
    c.model.hidden = 64;
    c.model.layers = 2;
    c.model.heads = 4;
    c.model.vocab_size = 304;  // the small tokenizer's ids
    c.model.seq_len = 48;
    c.data.jsonl = jsonl_;
    c.data.tokenizer = tokenizer_;
    c.train_micro_batch_size_per_gpu = micro;
    c.gradient_accumulation_steps = accumulation;
    c.optimizer.lr = 3e-3;
    c.training.steps = 4;
    c.training.lr_schedule.type = "constant";
    c.default_chunk_size = 6000;
    return c;
  }

  static TrainOptions options() {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    return o;
  }

  std::vector<StepMetrics> run(const config::TrainConfig& c) {
    Trainer t(c, build_model_and_engine(pstar::testing::cpu_plan(c)), options());
    std::vector<StepMetrics> out;
    while (t.steps_done() < c.training.steps) out.push_back(t.step());
    return out;
  }

  // Step 1's loss and gradient norm computed here: the model built alone from the same seed, the
  // same batches, per-token losses in float64 summed over every counted target of the global
  // batch and divided by their number; the gradient of that mean through autograd.
  std::pair<double, double> reference_step1(const config::TrainConfig& c) {
    auto model = build_model(c);
    const data::TrainingData d =
        data::open_training_data(c, model->vocab_size(), model->max_seq_len());
    double sum = 0;
    int64_t counted = 0;
    torch::Tensor total = torch::zeros({}, torch::kFloat64);
    for (int64_t micro = 1; micro <= c.gradient_accumulation_steps; ++micro) {
      const data::Batch b = d.train->batch(1, micro);
      const auto targets = b.targets.reshape({-1});
      const auto rows = torch::nonzero(targets.ne(data::kIgnoreIndex)).reshape({-1});
      const auto logits = model->forward_records(b.inputs, {b.positions, b.segments, rows});
      const auto losses = torch::nn::functional::cross_entropy(
          logits.to(torch::kFloat64), targets.index_select(0, rows),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      total = total + losses.sum();
      counted += rows.size(0);
    }
    EXPECT_EQ(counted, d.global_counted_targets(1));
    const auto mean = total / static_cast<double>(counted);
    sum = mean.item<double>();
    mean.backward();
    double sq = 0;
    for (const auto& p : model->parameters())
      if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
    return {sum, std::sqrt(sq)};
  }

  pstar::testing::ScratchDir dir_;
  std::string tokenizer_, jsonl_;
};

TEST_F(RecordLossTest, TheLossIsTheMeanOverTheGlobalBatchsCountedTargets) {
  for (int64_t accumulation : {1, 4}) {
    SCOPED_TRACE("accumulation " + std::to_string(accumulation));
    config::TrainConfig c = small_config(8 / accumulation, accumulation);
    c.training.steps = 1;
    const auto [loss, norm] = reference_step1(c);
    for (const char* mode : {"torch", "chunked"}) {
      SCOPED_TRACE(mode);
      c.engine.mode = config::engine_mode_from_name(mode);
      const auto m = run(c);
      ASSERT_EQ(m.size(), 1u);
      EXPECT_NEAR(m[0].loss, loss, 1e-6 * loss);
      EXPECT_NEAR(m[0].grad_norm, norm, 1e-5 * norm);
      EXPECT_GT(m[0].counted_targets, 0);
    }
  }
}

// The power of the check above: with uneven answers the mean of the micro-batches' means is
// another number.
TEST_F(RecordLossTest, AMeanPerMicroBatchWouldDiffer) {
  const config::TrainConfig c = small_config(2, 4);
  auto model = build_model(c);
  const data::TrainingData d =
      data::open_training_data(c, model->vocab_size(), model->max_seq_len());
  double sum = 0, mean_of_means = 0;
  int64_t counted = 0;
  torch::NoGradGuard no_grad;
  for (int64_t micro = 1; micro <= 4; ++micro) {
    const data::Batch b = d.train->batch(1, micro);
    const auto targets = b.targets.reshape({-1});
    const auto rows = torch::nonzero(targets.ne(data::kIgnoreIndex)).reshape({-1});
    ASSERT_GT(rows.size(0), 0);
    const auto losses = torch::nn::functional::cross_entropy(
        model->forward_records(b.inputs, {b.positions, b.segments, rows}).to(torch::kFloat64),
        targets.index_select(0, rows),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    sum += losses.sum().item<double>();
    counted += rows.size(0);
    mean_of_means += losses.mean().item<double>() / 4;
  }
  EXPECT_GT(std::abs(sum / static_cast<double>(counted) - mean_of_means), 1e-4);
}

TEST_F(RecordLossTest, AccumulationAndEnginesAgreeAndATightBudgetIsBitIdentical) {
  config::TrainConfig c = small_config(8, 1);
  c.engine.mode = config::EngineMode::kTorch;
  const auto torch_one = run(c);
  c.engine.mode = config::EngineMode::kChunked;
  const auto chunked_one = run(c);
  config::TrainConfig four = small_config(2, 4);
  const auto chunked_four = run(four);
  four.engine.device_memory = 3 << 20;  // chunks move every step
  const auto tight = run(four);
  ASSERT_EQ(tight.size(), chunked_four.size());
  for (size_t i = 0; i < torch_one.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_NEAR(chunked_one[i].loss, torch_one[i].loss, 1e-5 * torch_one[i].loss);
    EXPECT_NEAR(chunked_four[i].loss, chunked_one[i].loss, 1e-5 * chunked_one[i].loss);
    EXPECT_EQ(tight[i].loss, chunked_four[i].loss);  // bit for bit
    EXPECT_EQ(tight[i].grad_norm, chunked_four[i].grad_norm);
  }
  EXPECT_GT(tight.back().engine.moved_h2d_bytes, 0) << "the budget was not tight";
}

TEST_F(RecordLossTest, AGlobalBatchWithNothingCountedIsSkippedAndCounted) {
  pstar::testing::write_text(jsonl_, conversations(12, /*with_answers=*/false));
  config::TrainConfig c = small_config(2, 1);
  c.training.steps = 2;
  const auto m = run(c);
  ASSERT_EQ(m.size(), 2u);
  for (const StepMetrics& s : m) {
    EXPECT_TRUE(s.skipped);
    EXPECT_TRUE(std::isnan(s.loss));
    EXPECT_EQ(s.counted_targets, 0);
  }
}

TEST_F(RecordLossTest, PackingNeedsAModelThatTakesPackedRecords) {
  struct Plain : model::CausalLM {
    Plain() { w = register_parameter("w", torch::zeros({304, 304})); }
    torch::Tensor forward(const torch::Tensor& ids) override {
      return torch::nn::functional::one_hot(ids, 304).to(torch::kFloat32).matmul(w);
    }
    int64_t vocab_size() const override { return 304; }
    int64_t max_seq_len() const override { return 48; }
    torch::Tensor w;
  };
  config::TrainConfig c = small_config(2, 1);
  c.engine.mode = config::EngineMode::kTorch;
  try {
    Trainer t(c, std::make_shared<Plain>(), options());
    FAIL() << "packing was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set data.packing false"), std::string::npos) << e.what();
  }
  c.data.packing = false;
  Trainer t(c, std::make_shared<Plain>(), options());
  EXPECT_TRUE(std::isfinite(t.step().loss));
}

}  // namespace
}  // namespace pstar::train
