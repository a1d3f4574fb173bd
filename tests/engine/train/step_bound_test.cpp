// Note [step bound]: the three terms by hand, the rates measured on the emulated tier, and the
// closing line of a chunked run with the steady steps' work taken from its own metrics.
#include "pstar/train/step_bound.h"

#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pstar/formats/config.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

MachineRates hand_rates() {
  MachineRates r;
  r.compute_flops = 100e12;
  r.h2d_bytes = 50e9;
  r.d2h_bytes = 40e9;
  r.two_way_bytes = 80e9;
  r.host_memory_bytes = 20e9;
  return r;
}

TEST(StepBound, EachTermIsItsWorkOverItsRate) {
  StepWork w;
  w.model_flops = 150e12;             // 1.5 s at 100 TFLOPS
  w.h2d_bytes = 30'000'000'000;       // 0.6 s alone
  w.d2h_bytes = 20'000'000'000;       // 0.5 s alone; both together 50 GB at 80 GB/s: 0.625 s
  w.host_adam_bytes = 8'000'000'000;  // with the norm's reads and the copies' 50 GB, 60 GB:
  w.norm_host_bytes = 2'000'000'000;  // 3 s at 20 GB/s
  const StepBound b = step_bound(w, hand_rates());
  EXPECT_DOUBLE_EQ(b.compute_s, 1.5);
  EXPECT_DOUBLE_EQ(b.copy_s, 0.625);
  EXPECT_DOUBLE_EQ(b.host_s, 3.0);
  EXPECT_DOUBLE_EQ(b.seconds(), 3.0);
  EXPECT_STREQ(b.limit(), "host memory");
  w.h2d_bytes = w.d2h_bytes = 0;
  w.host_adam_bytes = w.norm_host_bytes = 0;
  EXPECT_STREQ(step_bound(w, hand_rates()).limit(), "compute");
}

TEST(StepBound, TheCopiesTakeTheSlowerOfOneDirectionAndBothAtOnce) {
  MachineRates r = hand_rates();
  r.host_memory_bytes = 0;  // the copies' host memory term left out here
  StepWork w;
  w.h2d_bytes = 40'000'000'000;  // 0.8 s alone
  w.d2h_bytes = 0;               // both at once: 40 GB at 80 GB/s, 0.5 s
  EXPECT_DOUBLE_EQ(step_bound(w, r).copy_s, 0.8);
  w.d2h_bytes = 32'000'000'000;  // 0.8 s alone too; together 72 GB at 80 GB/s: 0.9 s
  EXPECT_DOUBLE_EQ(step_bound(w, r).copy_s, 0.9);
  EXPECT_STREQ(step_bound(w, r).limit(), "copies");
  r.host_memory_bytes = 20e9;
  w.host_adam_bytes = 40'000'000'000;  // with the copies' 72 GB, 112 GB: 5.6 s
  EXPECT_STREQ(step_bound(w, r).limit(), "host memory");
  EXPECT_DOUBLE_EQ(step_bound(w, r).seconds(), 5.6);
}

TEST(StepBound, AnUnmeasuredRateLeavesItsTermOut) {
  StepWork w;
  w.model_flops = 1e12;
  w.h2d_bytes = 1'000'000'000;
  w.host_adam_bytes = 1'000'000'000;
  MachineRates r;
  r.h2d_bytes = 1e9;
  const StepBound b = step_bound(w, r);
  EXPECT_EQ(b.compute_s, 0.0);
  EXPECT_EQ(b.host_s, 0.0);
  EXPECT_DOUBLE_EQ(b.copy_s, 1.0);
}

// The GPT's model FLOPs per token by hand: 6 per parameter (forward 2, backward 4) and the
// attention scores, 12·L·h·s (QK^T and the weighted sum, 2 · 2·h·s each way, times 3).
TEST(StepBound, GptModelFlopsPerTokenBySixPAndTheScores) {
  config::TrainConfig c;
  c.model.preset = "gpt-tiny";
  c.model.seq_len = 32;
  const model::ModelShape shape = model::resolve_model_shape(c.model);
  const double p = static_cast<double>(shape.num_params());
  EXPECT_DOUBLE_EQ(plan::model_flops_per_token(shape),
                   6 * p + 12.0 * static_cast<double>(shape.layers() * shape.hidden()) * 32);
  // Recomputation is not model work: the estimate's 8·P with checkpointing stays out.
  EXPECT_LT(plan::model_flops_per_token(shape), plan::train_flops_per_token(shape, true));
}

TEST(StepBound, DescribeGivesTheRatioAndTheTermThatSetsIt) {
  StepBound b;
  b.compute_s = 1.0;
  b.copy_s = 0.25;
  b.host_s = 0.5;
  const std::string text = describe_bound(1.5, b);
  EXPECT_NE(text.find("step 1.500 s = 1.50 x the bound 1.000 s"), std::string::npos) << text;
  EXPECT_NE(text.find("copies 0.250"), std::string::npos) << text;
  EXPECT_NE(text.find("set by compute"), std::string::npos) << text;
}

TEST(StepBound, RatesOnTheEmulatedTierAreMeasuredAndFinite) {
  auto tier = tier::make_emulated_tier();
  RateSizes sizes;
  sizes.copy_bytes = int64_t{4} << 20;
  sizes.matmul_side = 128;
  sizes.host_bytes = int64_t{8} << 20;
  sizes.repeats = 2;
  for (bool half : {false, true}) {
    const MachineRates r = measure_rates(*tier, half, sizes);
    for (double rate :
         {r.compute_flops, r.h2d_bytes, r.d2h_bytes, r.two_way_bytes, r.host_memory_bytes}) {
      EXPECT_TRUE(std::isfinite(rate) && rate > 0) << rate << (half ? " (bf16)" : " (fp32)");
    }
  }
  // What it allocated went back: once the tier's free blocks are trimmed, it holds nothing.
  tier->trim();
  EXPECT_EQ(tier->host_memory().current(), 0);
}

// A chunked run asked for the bound: the summary's steady work is the mean of its metrics' steady
// steps (after the warm-up's trace and the first planned step), and the closing line is logged.
TEST(StepBound, TrainLogsTheSteadyStepsAgainstTheirBound) {
  pstar::testing::ScratchDir dir;
  const std::string corpus = dir.file("corpus.txt"), metrics = dir.file("m.jsonl");
  pstar::testing::write_text(corpus, pstar::testing::repetitive_corpus());
  config::TrainConfig c;
  c.model.preset = "gpt-tiny";
  c.model.seq_len = 32;
  c.data.text = corpus;
  c.train_micro_batch_size_per_gpu = 4;
  c.training.steps = 6;
  c.engine.device_memory = int64_t{4} << 20;  // small: chunks move, host Adam runs
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  o.metrics_path = metrics;
  o.step_bound = true;
  ::testing::internal::CaptureStderr();
  const TrainSummary s = train(c, o);
  const std::string log = ::testing::internal::GetCapturedStderr();

  const int64_t first_steady = c.engine.warmup_iterations + 2;
  ASSERT_EQ(s.steady_steps, c.training.steps - first_steady + 1);
  double h2d = 0, d2h = 0, adam = 0, norm = 0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto m = nlohmann::json::parse(line);
    if (!m.contains("step") || m["step"].get<int64_t>() < first_steady) continue;
    h2d += m["moved_h2d_bytes"].get<double>();
    d2h += m["moved_d2h_bytes"].get<double>();
    adam += m["adam_host_bytes"].get<double>();
    norm += m["grad_norm_host_bytes"].get<double>();
  }
  const auto n = static_cast<double>(s.steady_steps);
  EXPECT_EQ(s.steady_work.h2d_bytes, static_cast<int64_t>(h2d / n));
  EXPECT_EQ(s.steady_work.d2h_bytes, static_cast<int64_t>(d2h / n));
  EXPECT_EQ(s.steady_work.host_adam_bytes, static_cast<int64_t>(adam / n));
  EXPECT_EQ(s.steady_work.norm_host_bytes, static_cast<int64_t>(norm / n));
  EXPECT_GT(s.steady_work.norm_host_bytes, 0);
  EXPECT_GT(s.steady_work.host_adam_bytes, 0);
  EXPECT_GT(s.steady_step_s, 0);
  EXPECT_NE(log.find("step bound over 4 steady step(s): step "), std::string::npos) << log;
  EXPECT_NE(log.find("x the bound"), std::string::npos) << log;
}

TEST(StepBound, OffByDefaultOnTheCpu) {
  pstar::testing::ScratchDir dir;
  const std::string corpus = dir.file("corpus.txt");
  pstar::testing::write_text(corpus, pstar::testing::repetitive_corpus());
  config::TrainConfig c;
  c.model.preset = "gpt-tiny";
  c.model.seq_len = 32;
  c.data.text = corpus;
  c.train_micro_batch_size_per_gpu = 4;
  c.training.steps = 4;
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  ::testing::internal::CaptureStderr();
  const TrainSummary s = train(c, o);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.steady_steps, 2);  // counted all the same
  EXPECT_EQ(log.find("step bound"), std::string::npos) << log;
}

}  // namespace
}  // namespace pstar::train
