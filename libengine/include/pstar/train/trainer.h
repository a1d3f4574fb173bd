// The training loop behind `pstar train`. engine.mode "torch" is plain LibTorch training — fp32,
// or bf16/fp16 mixed precision with fp32 master weights — with AdamW/Adam, gradient accumulation
// and global-norm clipping. It is the reference the chunk engine is checked against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace pstar::config {
struct TrainConfig;
}
namespace pstar::model {
class CausalLM;
}

namespace pstar::train {

struct TrainOptions {
  std::string device = "auto";  // cpu | cuda | auto
  std::string metrics_path;     // JSON Lines, one object per optimizer step; empty: none
  bool progress = true;         // live progress line and periodic log lines
};

struct StepMetrics {
  int64_t step = 0;        // 1-based
  double loss = 0;         // mean cross-entropy over the step's tokens, before the update
  double lr = 0;           // the rate this step's update used
  double grad_norm = 0;    // global L2 norm of the (unscaled) gradient, before clipping
  double loss_scale = 1;   // fp16 loss scale used this step (1 otherwise)
  bool skipped = false;    // fp16 overflow: no update was made
  int64_t tokens = 0;      // tokens trained on so far, this step included
  double step_time_s = 0;
  double tokens_per_s = 0; // this step's throughput
  double elapsed_s = 0;    // since the first step started
};

struct TrainSummary {
  int64_t steps = 0;
  int64_t skipped_steps = 0;
  double first_loss = 0;
  double last_loss = 0;
  int64_t tokens = 0;
  double elapsed_s = 0;
  double tokens_per_s = 0;  // over the whole run
};

class Trainer {
 public:
  // Validates the data against the model, moves the model to the device and sets up precision
  // and the optimizer. The model's parameters must already be initialised.
  Trainer(const config::TrainConfig& config, std::shared_ptr<model::CausalLM> model,
          const TrainOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step (all its micro-batches); appends to the metrics file.
  StepMetrics step();
  // The remaining steps up to training.steps, with progress output and a final summary line.
  TrainSummary run();
  int64_t steps_done() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The configured model (GPT), initialised from training.seed, then from model.init_from if set.
std::shared_ptr<model::CausalLM> build_model(const config::TrainConfig& config);

// `pstar train`: thread set-up, model, trainer, run.
TrainSummary train(const config::TrainConfig& config, const TrainOptions& options);

}  // namespace pstar::train
