// The training loop behind `pstar train`: data, micro-batches, loss, loss scaling, clipping, the
// learning-rate schedule, metrics and progress. Parameters, gradients and the optimizer belong to
// an engine::ParamEngine: "chunked" (engine/chunked_engine.h) or "torch" (plain LibTorch, the
// reference).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "pstar/core/setup_phases.h"
#include "pstar/train/metrics.h"
#include "pstar/train/step_bound.h"

namespace pstar::config {
struct TrainConfig;
}
namespace pstar::model {
class CausalLM;
}
namespace pstar::engine {
class ParamEngine;
}
namespace pstar::plan {
struct RunPlan;
}
namespace pstar::dist {
class Communicator;
}

namespace pstar::train {

struct TrainOptions {
  std::string device = "auto";  // cpu | cuda | auto
  std::string metrics_path;     // JSON Lines, one object per optimizer step; empty: none
  bool progress = true;         // live progress line and periodic log lines
  // Continue from a checkpoint: a step directory, or a training.save_dir (its newest checkpoint).
  std::string resume_dir;
  // Several ranks: how long a rendezvous or a collective may wait for the others before the run
  // stops with a DistError.
  std::chrono::seconds dist_timeout{300};
  // Record a profile (chunk engine only) of the steps from `profile_from_step` on and write it to
  // this HDF5 file when the run ends (docs/profile.md); rank r > 0 writes `<path>.rank<r>`.
  std::string profile_path;
  int64_t profile_from_step = 1;
  // A stop requested between micro-batches abandons the step when finishing it would take longer
  // than this (Note [graceful stop] in trainer_step.cpp); otherwise the step is finished first.
  double abandon_step_after_s = 10.0;
  // After the run, measure the machine's rates and log the steady step against its bound (Note
  // [step bound]): nullopt does so for the chunk engine on a GPU only (it takes about a second;
  // on the CPU, where the device tier is emulated, the rates are measured small and say little).
  std::optional<bool> step_bound;
  // The run's communicator (train() makes one from the environment); null for one rank.
  dist::Communicator* comm = nullptr;
};

struct TrainSummary {
  int64_t steps = 0;
  int64_t skipped_steps = 0;
  double first_loss = 0;
  double last_loss = 0;
  int64_t tokens = 0;
  double elapsed_s = 0;
  double tokens_per_s = 0;  // over the whole run
  // SIGINT or SIGTERM if the run stopped on one before training.steps (after a checkpoint when
  // training.save_dir is set); 0 when it ran to the end.
  int stop_signal = 0;
  std::optional<double> last_eval_loss;  // the last held-out loss of the run, if any
  // The steady steps (after the chunk engine's warm-up and its first planned step): how many,
  // their median time, and their mean work on this rank (Note [step bound]; model_flops is left
  // to the caller, who knows the model's shape). steady_steps 0: none ran, or the torch engine.
  int64_t steady_steps = 0;
  double steady_step_s = 0;
  StepWork steady_work;
};

// What `pstar eval` reports.
struct EvalSummary {
  int64_t step = 0;     // the checkpoint's step (0: the initial model)
  double loss = 0;      // the held-out loss
  int64_t windows = 0;  // held-out windows read, over all ranks
  double elapsed_s = 0;
};

// A model and, for the chunk engine, the engine that already holds its parameters.
struct ModelAndEngine {
  std::shared_ptr<model::CausalLM> model;
  std::unique_ptr<engine::ParamEngine> engine;  // null: the trainer makes one for engine.mode
  // The set-up phases building them took (Note [set-up phases]); the trainer adds its own.
  core::SetupPhases setup;
  // The model's FLOPs per trained token (Note [flops per token] in plan/estimate.cpp), for the
  // metrics' tflops; 0 where unknown (a model the caller built: tflops is then left out).
  double model_flops_per_token = 0;
};

class Trainer {
 public:
  // Validates the data against the model and sets up the engine engine.mode names: "torch" moves
  // the model to the device; "chunked" takes its parameters into chunks module by module. The
  // model's parameters must already be initialised.
  Trainer(const config::TrainConfig& config, std::shared_ptr<model::CausalLM> model,
          const TrainOptions& options);
  // With an engine built alongside the model (build_model_and_engine).
  Trainer(const config::TrainConfig& config, ModelAndEngine built, const TrainOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Set-up is over, `setup_s` after it began (Note [set-up phases]): logs "set-up took" with the
  // split of its phases in one line, and writes the start-up record to the metrics file.
  void finish_setup(double setup_s);
  // The set-up phases timed so far: building the model and engine, the data, checkpoints.
  const core::SetupPhases& setup_phases() const;

  // One optimizer step (all its micro-batches); appends to the metrics file.
  StepMetrics step();
  // The remaining steps up to training.steps, with progress output and a final summary line.
  // Stops early, with a checkpoint, once core::stop_requested() (Note [graceful stop]).
  TrainSummary run();
  int64_t steps_done() const;
  // The held-out loss of the model as it is now (docs/training.md#held-out-loss): forward only,
  // changing nothing of training. ConfigError when the config has no held-out data.
  double evaluate();
  // Held-out windows one evaluation reads over all ranks; 0 without held-out data.
  int64_t eval_windows() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The device the model computes on for `config` and a --device choice ("cpu", "cuda", "auto"). For
// the chunk engine, CUDA only in builds with the CUDA device tier (tier::cuda_tier_built());
// otherwise its device tier is emulated on the CPU.
c10::Device compute_device(const config::TrainConfig& config, const std::string& device_option);

// The configured model (GPT), initialised from training.seed, then from model.init_from if set;
// the time it took is added to `phases` when given (Note [set-up phases]).
std::shared_ptr<model::CausalLM> build_model(const config::TrainConfig& config,
                                             core::SetupPhases* phases = nullptr);

// What the chunk engine's device tier is sized beside (Note [library workspaces]): the model's
// predicted activations for the plan, and the libraries' workspaces measured on its device.
struct NonModelPrediction {
  int64_t activations = 0;
  int64_t library_workspaces = 0;
  int64_t total() const { return activations + library_workspaces; }
};
NonModelPrediction predict_non_model(const plan::RunPlan& plan);

// The same, and for engine.mode "chunked" the chunk engine, which takes each unit of the model
// into chunks as it is built (start-up never holds a second full copy of the model). Everything
// is read from `plan` (plan::resolve_run, e.g. through train::plan_run): the config, the
// precision, the budgets and the device, which chooses the device tier.
ModelAndEngine build_model_and_engine(const plan::RunPlan& plan,
                                      dist::Communicator* comm = nullptr);

// `pstar train`: runtime set-up, precision choice, model, trainer, run. Under a launcher
// (dist/world.h) it joins the other ranks first and checks they all train the same config.
TrainSummary train(const config::TrainConfig& config, const TrainOptions& options);

// `pstar eval`: the same set-up as train() (options.resume_dir names the checkpoint), then one
// evaluation of the held-out data instead of training.
EvalSummary evaluate(const config::TrainConfig& config, const TrainOptions& options);

}  // namespace pstar::train
