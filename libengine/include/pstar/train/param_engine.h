// How a training run holds its parameters, gradients and optimizer state. The trainer owns the
// data, the forward/backward loop and the loss; a ParamEngine owns everything about model data:
// "torch" keeps plain LibTorch tensors and torch::optim (the reference), "chunked" keeps them in
// chunks that move between a device tier and the host (chunked_engine.h).
#pragma once

#include <cstdint>
#include <string>

namespace pstar::model {
class ModuleHooks;
}

namespace pstar::train {

struct StepMetrics;

class ParamEngine {
 public:
  virtual ~ParamEngine() = default;
  // One line for the start-up log.
  virtual std::string describe() const = 0;
  virtual void begin_step() {}
  // After each micro-batch's backward.
  virtual void end_micro_batch() {}
  // The global L2 norm of the unscaled gradient (the backward ran on loss × loss_scale). May be
  // non-finite (fp16 overflow).
  virtual double grad_norm(double loss_scale) = 0;
  // One Adam/AdamW update at rate `lr` with every gradient multiplied by `grad_multiplier`
  // (clip coefficient / loss scale).
  virtual void update(double lr, double grad_multiplier) = 0;
  // Ends the step, updated or skipped: gradients are dropped.
  virtual void end_step() = 0;
  // Adds the engine's own figures to the step's metrics.
  virtual void fill_metrics(StepMetrics& metrics) {}
  // Hooks the model's run_module() calls during forward and backward; nullptr for none.
  virtual model::ModuleHooks* hooks() { return nullptr; }
};

}  // namespace pstar::train
