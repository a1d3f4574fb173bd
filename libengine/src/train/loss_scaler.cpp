#include "pstar/train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "pstar/formats/config.h"

namespace pstar::train {

LossScaler::LossScaler(const config::Fp16Config& config)
    : dynamic_(config.loss_scale <= 0.0),
      scale_(dynamic_ ? std::ldexp(1.0, config.initial_scale_power) : config.loss_scale),
      min_scale_(config.min_loss_scale),
      window_(config.loss_scale_window),
      hysteresis_(config.hysteresis),
      hysteresis_left_(config.hysteresis) {}

std::array<double, 3> LossScaler::state() const {
  return {scale_, static_cast<double>(steps_since_overflow_),
          static_cast<double>(hysteresis_left_)};
}

void LossScaler::set_state(const std::array<double, 3>& state) {
  scale_ = state[0];
  steps_since_overflow_ = static_cast<int64_t>(state[1]);
  hysteresis_left_ = static_cast<int>(state[2]);
}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    steps_since_overflow_ = 0;
    if (hysteresis_left_ > 1) {
      --hysteresis_left_;
    } else {
      scale_ = std::max(scale_ / 2.0, min_scale_);
    }
    return;
  }
  if (++steps_since_overflow_ % window_ == 0) {
    scale_ *= 2.0;
    hysteresis_left_ = hysteresis_;
  }
}

}  // namespace pstar::train
