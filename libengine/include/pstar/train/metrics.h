// What one optimizer step reports (StepMetrics: the trainer's figures and the engine's, filled by
// engine::ParamEngine::fill_metrics), and the --metrics file that writes it: JSON Lines, one object
// per step, flushed as it is written so a crashed run keeps every finished step, after one start-up
// record (`"record": "startup"`) when `pstar train` ran the set-up. The step's figures are listed
// once, in metric_values, which both that file and the TensorBoard event file
// (train/tensorboard.h) write.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pstar/core/setup_phases.h"
#include "pstar/engine/metrics.h"

namespace pstar::train {

// Where a step's wall time went, as the training thread saw it (Note [step split]).
struct StepTimes {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
};

// A mixture of experts' routing over a step (Note [moe block] in model/moe.cpp).
struct RoutingMetrics {
  // The load-balancing loss (Note [router aux loss]), the mean over the micro-batches and ranks;
  // it joins the training loss only with output_router_logits. -1: not computed.
  double aux_loss = -1;
  double idle_experts = 0;  // (layer, expert) pairs given no token, per micro-batch, this rank
  double load_max_over_mean = 0;  // the busiest expert's tokens over the mean, the step's largest
  int64_t idle_in_step = 0;       // pairs given no token in the whole step, over every rank
};

// A training.eval_samples prompt as the model saw it and its greedy completion.
struct SampleText {
  std::string prompt, completion;
};

struct StepMetrics {
  int64_t step = 0;  // 1-based
  double loss = 0;   // mean cross-entropy over the step's tokens, before the update
  // The targets the loss averages over, on every rank (records: those that count; NaN loss and
  // `skipped` when none does).
  int64_t counted_targets = 0;
  double lr = 0;          // the rate this step's update used
  double grad_norm = 0;   // global L2 norm of the (unscaled) gradient, before clipping
  double loss_scale = 1;  // fp16 loss scale used this step (1 otherwise)
  bool skipped = false;   // fp16 overflow, or no counted target: no update was made
  int64_t tokens = 0;     // tokens trained on so far, this step included
  double step_time_s = 0;
  double tokens_per_s = 0;  // this step's throughput
  // This rank's model TFLOPS over the step: the model's FLOPs per token (Note [flops per token]
  // in plan/estimate.cpp) times its tokens, over step_time_s; -1 where the trainer does not know
  // the model's shape.
  double tflops = -1;
  double elapsed_s = 0;  // since the first step started
  StepTimes times;       // the step's forward, backward and optimizer parts
  // The held-out loss after this step's update, when the step was evaluated
  // (training.eval_interval, and the last step).
  std::optional<double> eval_loss;
  // training.eval_samples' completions, on the steps evaluated (written to the metrics file
  // only: they are text, not figures).
  std::vector<SampleText> eval_samples;
  // The engine's own figures (ParamEngine::fill_metrics): -1 where it does not measure them.
  engine::EngineMetrics engine;
  std::optional<RoutingMetrics> routing;  // a mixture of experts only
};

// One figure of a step line: its key in the --metrics file, its TensorBoard tag ("group/key",
// the held-out loss "eval/loss"; empty for `skipped`, which is not a number), and its value.
// The held-out loss's tag, which `pstar eval` writes too.
inline constexpr std::string_view kEvalLossTag = "eval/loss";

struct MetricValue {
  std::string_view key;
  std::string_view tag;
  std::variant<int64_t, double, bool> value;
};

// Note [one metric table]
// Every figure of a step, in one list: what the step measured (the engine's figures it does not
// measure, -1, and eval_loss on a step not evaluated are left out). MetricsWriter writes it as a
// JSON object and TensorBoardLog as scalars, so that a figure added here reaches both, under a tag
// chosen where its key is; docs/training.md lists the tags, and a test checks that list against
// this one.
std::vector<MetricValue> metric_values(const StepMetrics& metrics);

class MetricsWriter {
 public:
  // Truncates `path`; IoError naming it if it cannot be created.
  explicit MetricsWriter(const std::string& path);
  void write(const StepMetrics& metrics);
  // The start-up record (Note [set-up phases]): {"record": "startup", "setup_s": total, and per
  // phase "<name>_s" and, for the phases that write payloads, "<name>_bytes"; "other_s"}. It has
  // no "step" key; step lines have no "record" key.
  void write_startup(const core::SetupPhases& phases, double setup_s);

 private:
  void write_line(const std::string& text);
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

}  // namespace pstar::train
