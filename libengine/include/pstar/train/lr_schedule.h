// Learning rate per optimizer step: a linear warm-up, then cosine decay to min_lr or constant.
#pragma once

#include <cstdint>

namespace pstar::config {
struct TrainConfig;
}

namespace pstar::train {

class LrSchedule {
 public:
  explicit LrSchedule(const config::TrainConfig& config);
  // The rate used by step `step` (1-based): step k of w warm-up steps gets lr·k/w; after warm-up,
  // cosine goes from lr at the first decay step towards min_lr at the last.
  double at(int64_t step) const;

 private:
  bool cosine_;
  double lr_, min_lr_;
  int64_t warmup_, steps_;
};

}  // namespace pstar::train
