// Learning-rate schedule and loss scaler against hand-computed values.
#include <cmath>

#include <gtest/gtest.h>

#include "pstar/formats/config.h"
#include "pstar/train/loss_scaler.h"
#include "pstar/train/lr_schedule.h"

namespace pstar::train {
namespace {

TEST(LrScheduleTest, WarmupThenCosine) {
  config::TrainConfig c;
  c.optimizer.lr = 1.0;
  c.training.steps = 14;
  c.training.lr_schedule.warmup_steps = 4;
  c.training.lr_schedule.min_lr = 0.1;
  LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.at(1), 0.25);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_DOUBLE_EQ(s.at(5), 1.0);  // first decay step: full rate
  // Decay over 10 steps: step 5 + i is at progress i / 10.
  EXPECT_NEAR(s.at(10), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-12);
  EXPECT_NEAR(s.at(14), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.9)), 1e-12);
  for (int64_t i = 5; i < 14; ++i) EXPECT_GT(s.at(i), s.at(i + 1));
}

TEST(LrScheduleTest, Constant) {
  config::TrainConfig c;
  c.optimizer.lr = 0.5;
  c.training.steps = 10;
  c.training.lr_schedule.type = "constant";
  c.training.lr_schedule.warmup_steps = 2;
  LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.at(1), 0.25);
  EXPECT_DOUBLE_EQ(s.at(2), 0.5);
  EXPECT_DOUBLE_EQ(s.at(10), 0.5);
}

TEST(LossScalerTest, DynamicWithHysteresisWindowAndFloor) {
  config::Fp16Config f;
  f.enabled = true;
  f.initial_scale_power = 4;
  f.loss_scale_window = 3;
  f.hysteresis = 2;
  f.min_loss_scale = 4;
  LossScaler s(f);
  EXPECT_TRUE(s.is_dynamic());
  EXPECT_EQ(s.scale(), 16.0);
  s.update(true);  // absorbed by hysteresis
  EXPECT_EQ(s.scale(), 16.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 8.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0);
  s.update(true);  // floor
  EXPECT_EQ(s.scale(), 4.0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 4.0);
  s.update(false);  // window of 3 clean steps
  EXPECT_EQ(s.scale(), 8.0);
  s.update(true);  // hysteresis restored after growth
  EXPECT_EQ(s.scale(), 8.0);
}

TEST(LossScalerTest, StaticNeverMoves) {
  config::Fp16Config f;
  f.loss_scale = 128;
  LossScaler s(f);
  EXPECT_FALSE(s.is_dynamic());
  for (int i = 0; i < 5; ++i) s.update(i % 2 == 0);
  EXPECT_EQ(s.scale(), 128.0);
}

}  // namespace
}  // namespace pstar::train
