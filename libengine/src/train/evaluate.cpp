// The held-out loss (docs/training.md#held-out-loss): its windows, the evaluation between steps
// and `pstar eval`.
#include <algorithm>
#include <memory>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/model/hooks.h"
#include "trainer_impl.h"

namespace pstar::train {

using core::Clock;
using core::seconds_since;

void Trainer::Impl::init_eval() {
  const int64_t interval = config.training.eval_interval;
  log::info("held-out: ", data.describe_eval(), " (", config.training.eval_batches, " x ",
            config.train_micro_batch_size_per_gpu, " asked), evaluated ",
            interval > 0 ? str_cat("every ", interval, " steps and ") : std::string(),
            "after the last step");
}

bool Trainer::Impl::eval_due() const {
  if (!data.eval) return false;
  const int64_t interval = config.training.eval_interval;
  return step == config.training.steps || (interval > 0 && step % interval == 0);
}

// Note [evaluation] in engine/chunked_engine.h says what the engine guarantees; the trainer's
// part: autograd off (no graph, no gradient hooks), the model in eval mode, and the CPU generator
// put back afterwards, so that even a model that draws random numbers in eval mode leaves
// training's stream (dropout) where it was. The data is not the training sampler's: the windows
// are a pure function of the held-out source (Note [evaluation windows]). Token windows average
// the windows' mean losses; records the losses of every target that counts over all windows
// (Note [loss over counted targets]).
double Trainer::Impl::evaluate() {
  const data::EvalBatches& windows = *data.eval;
  const int64_t vocab = model->vocab_size();
  const int64_t seq_len = model->max_seq_len();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const at::Tensor rng = generator.get_state();
  double sum = 0;  // of the per-window mean losses on this rank
  engine->begin_eval();
  {
    model::ScopedModuleHooks hooks(engine->eval_hooks());
    for (int64_t b = 0; b < windows.batches_per_rank(); ++b) {
      data::Batch batch = windows.batch(b);
      const int64_t rows = batch.inputs.size(0);
      // An empty share still runs a forward with the others: the chunk engine gathers in it.
      if (rows == 0 && comm == nullptr) continue;
      if (rows == 0) batch = windows.filler();
      if (batch.packed()) {
        const MicroLoss loss = micro_loss(batch);
        if (rows > 0) sum += loss.value.to(torch::kFloat64).item<double>();
        continue;
      }
      auto logits = model->forward(batch.inputs.to(device));
      auto losses = torch::nn::functional::cross_entropy(
          logits.reshape({-1, vocab}).to(torch::kFloat32), batch.targets.to(device).reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      if (rows > 0)
        sum += losses.reshape({rows, seq_len}).mean(1).to(torch::kFloat64).sum().item<double>();
    }
  }
  // Before end_eval, which drops the communicator's figures of the evaluation.
  if (comm != nullptr) sum = comm->all_reduce_sum(sum);
  engine->end_eval();
  generator.set_state(rng);
  model->train(was_training);
  if (data.has_records())
    return sum / static_cast<double>(std::max<int64_t>(1, data.eval_counted_targets()));
  return sum / static_cast<double>(windows.windows());
}

double Trainer::evaluate() {
  PSTAR_CHECK(impl_->data.eval != nullptr, ConfigError,
              "no held-out data to evaluate: set data.eval (a second source: path or text) or "
              "data.eval_fraction (e.g. --set data.eval_fraction=0.05)");
  return impl_->evaluate();
}

int64_t Trainer::eval_windows() const { return impl_->data.eval ? impl_->data.eval->windows() : 0; }

EvalSummary evaluate(const config::TrainConfig& config, const TrainOptions& options) {
  // Nothing is saved: the config's save_dir is neither created nor checked for room. The held-out
  // loss alone goes to training.tensorboard_dir, in a file of its own, not the trainer's.
  config::TrainConfig eval_config = config;
  eval_config.training.save_dir.clear();
  eval_config.training.save_interval = 0;
  eval_config.training.tensorboard_dir.clear();
  PreparedRun run = prepare_run(eval_config, options);
  // Before evaluating, so that a directory that cannot be written is found at once; not without
  // held-out data, which evaluate() refuses.
  std::unique_ptr<TensorBoardLog> tensorboard;
  if (!config.training.tensorboard_dir.empty() && (run.comm == nullptr || run.comm->rank() == 0) &&
      run.trainer->eval_windows() > 0)
    tensorboard = std::make_unique<TensorBoardLog>(config.training.tensorboard_dir,
                                                   "training.tensorboard_dir");
  const auto begin = Clock::now();
  EvalSummary summary;
  summary.step = run.trainer->steps_done();
  summary.loss = run.trainer->evaluate();
  summary.windows = run.trainer->eval_windows();
  summary.elapsed_s = seconds_since(begin);
  log::info("eval: step ", summary.step, ", held-out loss ", format_fixed(summary.loss, 4),
            " over ", summary.windows, " windows in ", format_duration(summary.elapsed_s));
  if (tensorboard) {
    tensorboard->write_eval(summary.step, summary.loss);
    tensorboard->flush();
    log::info("tensorboard: ", kEvalLossTag, " at step ", summary.step, " in ",
              tensorboard->path());
  }
  return summary;
}

}  // namespace pstar::train
