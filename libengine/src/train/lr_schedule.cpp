#include "pstar/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "pstar/formats/config.h"

namespace pstar::train {

LrSchedule::LrSchedule(const config::TrainConfig& config)
    : cosine_(config.training.lr_schedule.type == "cosine"),
      lr_(config.optimizer.lr),
      min_lr_(config.training.lr_schedule.min_lr),
      warmup_(config.training.lr_schedule.warmup_steps),
      steps_(config.training.steps) {}

double LrSchedule::at(int64_t step) const {
  if (warmup_ > 0 && step <= warmup_) return lr_ * static_cast<double>(step) / warmup_;
  if (!cosine_) return lr_;
  const int64_t decay_steps = std::max<int64_t>(1, steps_ - warmup_);
  const double progress =
      std::clamp(static_cast<double>(step - warmup_ - 1) / decay_steps, 0.0, 1.0);
  return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace pstar::train
