// Trainer::Impl, shared by the trainer's files (private to src/train): trainer.cpp (set-up and
// checkpoints), trainer_profile.cpp (profile set-up), trainer_step.cpp (one step, stops) and
// trainer_run.cpp (the run loop and `pstar train`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "eval_samples.h"
#include "pstar/base/error.h"
#include "pstar/checkpoint/run_checkpoint.h"
#include "pstar/core/clock.h"
#include "pstar/core/setup_phases.h"
#include "pstar/data/training_data.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/param_engine.h"
#include "pstar/formats/config.h"
#include "pstar/model/causal_lm.h"
#include "pstar/plan/run_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/loss_scaler.h"
#include "pstar/train/lr_schedule.h"
#include "pstar/train/metrics.h"
#include "pstar/train/profiler.h"
#include "pstar/train/speculation_policy.h"
#include "pstar/train/tensorboard.h"
#include "pstar/train/trainer.h"
#include "routing_stats.h"

namespace pstar::train {

using engine::ParamEngine;

struct Trainer::Impl {
  config::TrainConfig config;
  std::shared_ptr<model::CausalLM> model;
  TrainOptions options;
  c10::Device device{c10::kCPU};
  c10::ScalarType dtype = torch::kFloat32;

  // What training samples and the held-out batches evaluation reads (token windows or records).
  data::TrainingData data;
  std::unique_ptr<ParamEngine> engine;
  LrSchedule schedule;
  LossScaler scaler;
  // Where a step's figures go (record()): the --metrics file and, with training.tensorboard_dir,
  // rank 0's event file (train/tensorboard.h); for their tflops, this rank's model FLOPs per step
  // (0: unknown); and a mixture of experts' routing figures over the current step.
  struct {
    std::optional<MetricsWriter> file;
    std::unique_ptr<TensorBoardLog> tensorboard;
    double model_flops_per_step = 0;
    RoutingStats routing;
    std::unique_ptr<EvalSamples> samples;  // training.eval_samples, their completions' prompts
  } metrics;
  std::unique_ptr<Profiler> profiler;
  // Made once the config is resolved (init).
  std::optional<checkpoint::RunCheckpoints> checkpoints;
  // Note [set-up phases]: what building the model and engine took, and init()'s own phases.
  core::SetupPhases setup;

  int64_t step = 0;
  // Over the whole run (checkpointed): tokens trained on, steps skipped.
  struct {
    int64_t tokens = 0;
    int64_t skipped = 0;
  } totals;
  // Note [speculation by cost]: whether a step speculates (the plan's rule, and for "auto" the
  // run's own figures).
  SpeculationPolicy speculation{plan::RunPlan::Speculation::kOff, 0};
  std::optional<core::Clock::time_point> start;
  dist::Communicator* comm = nullptr;  // several ranks only
  int stop_signal = 0;                 // agreed by every rank: the run stops (Note [graceful stop])
  at::Tensor step_rng;                 // the generator as the current step found it

  Impl(const config::TrainConfig& c, std::shared_ptr<model::CausalLM> m, const TrainOptions& o)
      : config(c), model(std::move(m)), options(o), schedule(c), scaler(c.fp16), comm(o.comm) {}

  int64_t rank() const { return comm != nullptr ? comm->rank() : 0; }
  int64_t world() const { return comm != nullptr ? comm->world_size() : 1; }
  // Over all ranks: the global batch.
  int64_t tokens_per_step() const {
    return world() * config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps *
           model->max_seq_len();
  }
  std::string rank_path(const std::string& path) const {
    return rank() == 0 ? path : str_cat(path, ".rank", rank());
  }

  void init(std::unique_ptr<ParamEngine> prebuilt);
  void start_profile();
  // nullopt: a stop was agreed between micro-batches and the step was abandoned.
  std::optional<StepMetrics> run_step(bool may_abandon);
  std::optional<StepMetrics> train_step(bool may_abandon);
  bool agree_to_stop();
  bool abandon_step(double seconds_so_far, int64_t micro_done, double* rest_s);
  void stop_after(int64_t completed_step);
  void save_checkpoint();
  void resume(const std::string& where);
  // Logs the held-out batches and when they are evaluated (evaluate.cpp).
  void init_eval();
  // One micro-batch's cross-entropy, a scalar fp32 tensor on the device in the graph (Note [loss
  // over counted targets] in trainer_step.cpp): the mean over its targets for token windows, the
  // sum over the targets that count for records.
  struct MicroLoss {
    torch::Tensor value;
    int64_t counted = 0;  // the targets it covers
  };
  MicroLoss micro_loss(const data::Batch& batch);
  // A step whose global batch counts no target: no update, a warning, `skipped` counted.
  StepMetrics skip_empty_step(core::Clock::time_point step_start);
  // A finished step's figures to the metrics file and the event file (trainer_step.cpp).
  void record(const StepMetrics& m);
  // Whether the console logs step `m` as a line of its own; the event file is flushed there too
  // (Note [tensorboard flushes]).
  bool logged_step(const StepMetrics& m) const;
  // Note [speculation by cost]: step `m`'s figures to the policy, the ranks' summed where a window
  // ends, and its decisions logged.
  void record_speculation(const StepMetrics& m);
  // Before the step's last backward: the engine leaves the experts no token chose in the whole
  // step, on any rank, as torch's Adam leaves a parameter without gradient (Note [held
  // parameters]).
  void hold_idle_experts();
  // Whether the step that just ended is evaluated (training.eval_interval, the last step).
  bool eval_due() const;
  // The held-out loss now (Note [evaluation] in engine/chunked_engine.h; evaluate.cpp).
  double evaluate();
  // training.eval_samples (eval_samples.cpp): due on the steps evaluated; their completions now.
  bool samples_due() const;
  std::vector<SampleText> sample();
};

// What `pstar train` and `pstar eval` share: the ranks joined (under a launcher), the plan
// resolved, the model and its engine built, the trainer made (trainer_run.cpp).
struct PreparedRun {
  std::unique_ptr<dist::Communicator> comm;
  std::unique_ptr<Trainer> trainer;
  // Note [step bound]: what the closing line needs once the trainer is gone; unset where the run
  // does not log it.
  struct BoundInputs {
    c10::Device device{c10::kCPU};
    bool half = false;
    int64_t arena_bytes = 0;
    double model_flops_per_step = 0;  // on this rank
  };
  std::optional<BoundInputs> bound;
};
PreparedRun prepare_run(const config::TrainConfig& config, const TrainOptions& options);

// The chunk engine's device tier for the plan's compute device (Note [device tier]);
// build_model.cpp.
std::unique_ptr<tier::DeviceTier> make_tier(const plan::RunPlan& plan, int64_t predicted_non_model);

}  // namespace pstar::train
