// Loss scaling for fp16 training. Dynamic by default with PatrickStar's/DeepSpeed's defaults:
// start at 2^initial_scale_power; on an overflow skip the step and, once `hysteresis`
// overflows have been absorbed, halve the scale (not below min_loss_scale); after
// loss_scale_window steps without overflow, double it. A static scale (loss_scale > 0) never moves.
#pragma once

#include <array>
#include <cstdint>

namespace pstar::config {
struct Fp16Config;
}

namespace pstar::train {

class LossScaler {
 public:
  explicit LossScaler(const config::Fp16Config& config);
  double scale() const { return scale_; }
  // Call once per optimizer step with whether the gradients overflowed.
  void update(bool overflow);
  bool is_dynamic() const { return dynamic_; }
  // For checkpoints: {scale, steps since the last overflow, hysteresis left}.
  std::array<double, 3> state() const;
  void set_state(const std::array<double, 3>& state);

 private:
  bool dynamic_;
  double scale_;
  double min_scale_;
  int64_t window_;
  int hysteresis_;
  int hysteresis_left_;
  int64_t steps_since_overflow_ = 0;
};

}  // namespace pstar::train
