// How a training run holds its parameters, gradients and optimizer state. The trainer owns the
// data, the forward/backward loop and the loss; a ParamEngine owns everything about model data:
// "torch" keeps plain LibTorch tensors and torch::optim (the reference), "chunked" keeps them in
// chunks that move between a device tier and the host (chunked_engine.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pstar/checkpoint/store.h"
#include "pstar/engine/metrics.h"

namespace pstar::model {
class ModuleHooks;
}

namespace pstar::engine {

class EngineObserver;
using checkpoint::TensorList;
using checkpoint::TensorMap;

// An engine's part of a checkpoint, in the checkpoint module's tensor list and map.
using checkpoint::TensorList;
using checkpoint::TensorMap;

class ParamEngine {
 public:
  virtual ~ParamEngine() = default;
  // One line for the start-up log.
  virtual std::string describe() const = 0;
  // Parameters the engine manages; -1 when the model's own tensors tell (they all hold values).
  virtual int64_t num_parameters() const { return -1; }
  virtual void begin_step() {}
  // After begin_step, when the update does not depend on the gradients (no clipping, no loss
  // scaling): unless the step fails, update() will be called with these arguments, so the engine
  // may start it as gradients become final.
  virtual void expect_update(double lr, double grad_multiplier) {}
  // After begin_step, when the update depends on the gradients (clipping, loss scaling): the update
  // the step makes if it does not clip or overflow. The engine may start it as gradients become
  // final, provided update() (with whatever arguments) or a step without one still gives exactly
  // what the engine would have without this call (Note [speculative adam]). `max_norm`: the
  // gradient norm above which the step clips (gradient_clipping; 0: it never clips), so that the
  // engine stops speculating once the gradients it has seen show the step will.
  virtual void speculate_update(double lr, double grad_multiplier, double max_norm) {}
  // Before the last micro-batch's backward, where some parameters get no gradient this step (a
  // mixture of experts' experts given no token on any rank): the update leaves them as torch's
  // Adam leaves a parameter whose gradient is None, their values, moments and own step count as
  // they are (Note [held parameters]). `names`: the model's parameter names.
  virtual void skip_update(const std::vector<std::string>& names) = 0;
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
  // The engine's own figures for the step that ended last.
  virtual void fill_metrics(EngineMetrics& metrics) {}
  // Reports to `observer` from now on (null: stops); it must outlive the engine's use of it.
  // Returns false when this engine has nothing to report (the torch engine).
  virtual bool set_observer(EngineObserver* observer) { return false; }
  // Checkpoints: every parameter's fp32 master value under its name, its Adam state as
  // <name>.exp_avg / <name>.exp_avg_sq, "__pstar__.adam_step", and for a parameter whose own step
  // count is behind it the updates it missed (checkpoint::adam_missed_of).
  virtual void state_dict(TensorList& out) = 0;
  // Restores what state_dict wrote; FormatError naming `file` and the tensor on any mismatch.
  virtual void load_state_dict(const TensorMap& in, const std::string& file) = 0;
  // Hooks the model's run_module() calls during forward and backward; nullptr for none.
  virtual model::ModuleHooks* hooks() { return nullptr; }
  // Evaluation, between steps: forwards run between begin_eval() and end_eval() under
  // torch::NoGradGuard with eval_hooks() active (nullptr: none needed). The engine records nothing
  // of them for training (trace, placement, metrics, observer) and ends with its model data where
  // it began, so the steps that follow are those a run without evaluation makes (Note [evaluation]
  // in chunked_engine.h). With several ranks every rank runs the same number of forwards.
  virtual void begin_eval() {}
  virtual model::ModuleHooks* eval_hooks() { return nullptr; }
  virtual void end_eval() {}
};

}  // namespace pstar::engine
