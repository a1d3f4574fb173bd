// One optimizer step and stopping between steps or micro-batches (Note [graceful stop]).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>
#include <optional>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/core/stop.h"
#include "pstar/model/hooks.h"
#include "trainer_impl.h"

namespace pstar::train {

using core::Clock;
using core::seconds_since;

// Note [graceful stop]
// SIGINT/SIGTERM (core/stop.h) only raise a flag. The trainer looks at it where the model data is
// consistent: after each step, and between micro-batches when gradient accumulation makes the rest
// of a step long (TrainOptions::abandon_step_after_s, 10 s by default, at the step's own pace).
// Abandoning a step loses its micro-batches but nothing else: masters and Adam state change only in
// update(), and the RNG is put back to where the step began, so the checkpoint is the one the
// previous step would have written. Every rank must stop at the same point or the others would wait
// in a collective: the flag is all-reduced at each point (one scalar), and so is the estimate that
// decides abandoning. A second signal kills the process at once (stop.cpp); checkpoint files are
// written atomically, so the last complete one stays valid.

// Note [step split]
// forward_s runs from the model's forward to the loss's value on the host (loss.item(): the device
// has finished the forward then), backward_s from there until the engine's end of the micro-batch
// returns, optimizer_s over the gradient norm, the update and the engine's end of the step; summed
// over micro-batches. On a GPU the backward's last kernels may still run when backward_s ends: the
// gradient norm's sums wait for them, inside optimizer_s. The engine's move_s and adam_wait_s (the
// training thread's time in moves and waiting for queued host Adam) fall inside these parts.

// Note [loss over counted targets]
// The loss of a step is the mean cross-entropy over the targets that count in its global batch
// (every micro-batch of every rank), N of them, and the logged loss is that quantity. Token
// windows count every target; records (data.jsonl) only the answers' (Note [record masks]), so
// micro-batches and ranks hold different numbers of them, and a mean per micro-batch would weigh a
// short answer's tokens more than a long one's. So each micro-batch contributes the SUM of its
// counted targets' losses, scaled by R / N before the backward: R because the engines average
// gradients over the R ranks (group_sync.h), N because the sampler knows it for every rank
// without a collective (data::TrainingData::global_counted_targets). Token windows keep the mean
// per micro-batch over the accumulation steps, the same quantity with their rounding of old. A
// global batch in which nothing counts is skipped with a warning and counted; a micro-batch in
// which nothing counts still runs its forward and backward with a zero loss, since the engine's
// hooks and the other ranks' collectives expect every module's.

Trainer::Impl::MicroLoss Trainer::Impl::micro_loss(const data::Batch& batch) {
  const int64_t vocab = model->vocab_size();
  const auto inputs = batch.inputs.to(device);
  auto check_logits = [&](const torch::Tensor& logits, std::vector<int64_t> want) {
    PSTAR_CHECK(logits.sizes().vec() == want, ConfigError,
                "the model's forward returned logits of shape ", logits.sizes(), "; expected ",
                c10::IntArrayRef(want));
  };
  MicroLoss out;
  if (!batch.packed()) {
    const auto logits = model->forward(inputs);
    check_logits(logits, {inputs.size(0), inputs.size(1), vocab});
    out.counted = batch.targets.numel();
    out.value = torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(torch::kFloat32), batch.targets.to(device).reshape({-1}));
    return out;
  }
  // Only the positions whose targets count reach the head (Note [packed batches]).
  const auto targets = batch.targets.reshape({-1});
  auto rows = torch::nonzero(targets.ne(data::kIgnoreIndex)).reshape({-1});
  out.counted = rows.size(0);
  if (out.counted == 0) rows = torch::zeros({1}, torch::kLong);
  model::RecordInputs records{batch.positions.to(device), batch.segments.to(device),
                              rows.to(device)};
  const auto logits = model->forward_records(inputs, records);
  check_logits(logits, {rows.size(0), vocab});
  const auto picked =
      out.counted > 0 ? targets.index_select(0, rows) : torch::zeros({1}, torch::kLong);
  out.value = torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32), picked.to(device),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  if (out.counted == 0) out.value = out.value * 0.0;
  return out;
}

StepMetrics Trainer::Impl::skip_empty_step(Clock::time_point step_start) {
  ++totals.skipped;
  log::end_status();
  log::warn("step ", step, ": no target of the global batch counts in the loss (data.loss_on \"",
            config::loss_on_name(config.data.loss_on),
            "\" selects no token of its records); step skipped without an "
            "update (",
            totals.skipped, totals.skipped == 1 ? " step" : " steps", " skipped so far)");
  StepMetrics m;
  m.step = step;
  m.loss = std::numeric_limits<double>::quiet_NaN();  // written as null
  m.skipped = true;
  m.loss_scale = config.fp16.enabled ? scaler.scale() : 1.0;
  engine->fill_metrics(m.engine);
  totals.tokens += tokens_per_step();
  m.tokens = totals.tokens;
  m.step_time_s = seconds_since(step_start);
  m.tokens_per_s = static_cast<double>(tokens_per_step()) / std::max(m.step_time_s, 1e-9);
  if (eval_due()) m.eval_loss = evaluate();
  if (samples_due()) m.eval_samples = sample();
  m.elapsed_s = seconds_since(*start);
  record(m);
  const auto& t = config.training;
  if (!t.save_dir.empty() && t.save_interval > 0 &&
      (step % t.save_interval == 0 || step == t.steps))
    save_checkpoint();
  return m;
}

void Trainer::Impl::record(const StepMetrics& m) {
  if (metrics.file) metrics.file->write(m);
  if (metrics.tensorboard) {
    metrics.tensorboard->write_step(m);
    if (logged_step(m)) metrics.tensorboard->flush();
  }
}

bool Trainer::Impl::logged_step(const StepMetrics& m) const {
  return m.step == 1 || m.step % config.training.log_interval == 0 ||
         m.step == config.training.steps || m.eval_loss.has_value() || !m.eval_samples.empty();
}

bool Trainer::Impl::agree_to_stop() {
  int local = core::stop_signal();
  if (comm != nullptr) {
    // Ranks that got no signal stop because another did: as if told by SIGTERM.
    if (comm->all_reduce_sum(local != 0 ? 1.0 : 0.0) > 0 && local == 0) local = SIGTERM;
  }
  if (local != 0) stop_signal = local;
  return stop_signal != 0;
}

bool Trainer::Impl::abandon_step(double seconds_so_far, int64_t micro_done, double* rest_s) {
  // A profile records whole steps: a profiled run finishes its step.
  if (profiler != nullptr || !agree_to_stop()) return false;
  // The rest of the step at its own pace so far; every rank decides on the same (mean) figure.
  double rest = seconds_so_far / static_cast<double>(micro_done) *
                static_cast<double>(config.gradient_accumulation_steps - micro_done);
  if (comm != nullptr) rest = comm->all_reduce_sum(rest) / static_cast<double>(world());
  *rest_s = rest;
  return rest > options.abandon_step_after_s;
}

void Trainer::Impl::stop_after(int64_t completed_step) {
  const char* name = stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
  log::end_status();
  if (metrics.tensorboard) metrics.tensorboard->flush();  // Note [tensorboard flushes]
  if (!config.training.save_dir.empty()) {
    if (checkpoints->last_saved_step() != completed_step) save_checkpoint();
    log::info("stopped on ", name, " after step ", completed_step, " of ", config.training.steps,
              "; continue with the same command and --resume ", config.training.save_dir);
  } else {
    log::warn("stopped on ", name, " after step ", completed_step, " of ", config.training.steps,
              "; training.save_dir is not set, so no checkpoint was written");
  }
}

StepMetrics Trainer::step() { return *impl_->run_step(/*may_abandon=*/false); }

std::optional<StepMetrics> Trainer::Impl::run_step(bool may_abandon) {
  try {
    return train_step(may_abandon);
  } catch (const c10::OutOfMemoryError& e) {
    // LibTorch's allocator (activations, temporaries) ran out; chunk payloads are pstar's own and
    // fail with pstar's OutOfMemoryError. Checkpoints are written only between steps, so the last
    // one is intact.
    std::string what = e.what_without_backtrace();
    what = what.substr(0, what.find('\n'));
    PSTAR_THROW(OutOfMemoryError, "step ", step, ": ", device.str(),
                " ran out of memory for activations and temporaries: ", what,
                "; lower train_micro_batch_size_per_gpu or turn on "
                "engine.activation_checkpointing",
                config.engine.mode == config::EngineMode::kChunked
                    ? ", or lower engine.device_memory so that chunks leave LibTorch more"
                    : "",
                checkpoints->intact_hint());
  }
}

void Trainer::Impl::hold_idle_experts() {
  const auto idle = metrics.routing.idle_in_step(comm);
  if (idle.empty()) return;
  std::vector<std::string> names;
  for (const auto& [layer, expert] : idle) {
    const std::vector<std::string> own = model->expert_parameters(layer, expert);
    names.insert(names.end(), own.begin(), own.end());
  }
  engine->skip_update(names);
}

void Trainer::Impl::record_speculation(const StepMetrics& m) {
  SpeculationSample sample;
  sample.clipped =
      m.skipped || (config.gradient_clipping > 0 && m.grad_norm > config.gradient_clipping);
  sample.step_s = m.step_time_s;
  sample.adam_wait_s = std::max(0.0, m.engine.adam.wait_s);
  sample.adam_host_s = std::max(0.0, m.engine.adam.host_s);
  // Every rank decides from the same sums (Note [speculation by cost]).
  SpeculationPolicy::SumOverRanks sum;
  if (comm != nullptr) sum = [this](std::vector<double>& values) { comm->all_reduce_sum(values); };
  speculation.record(m.step, sample, sum, world());
  const std::string message = speculation.take_message();
  if (message.empty()) return;
  log::end_status();
  if (speculation.message_is_warning()) {
    log::warn(message);
  } else {
    log::info("step ", m.step, ": ", message);
  }
}

std::optional<StepMetrics> Trainer::Impl::train_step(bool may_abandon) {
  if (!start) start = Clock::now();
  const auto step_start = Clock::now();
  const bool abandonable = may_abandon && config.gradient_accumulation_steps > 1;
  if (abandonable) step_rng = at::detail::getDefaultCPUGenerator().get_state();
  ++step;
  const int64_t accumulation = config.gradient_accumulation_steps;
  const double loss_scale = config.fp16.enabled ? scaler.scale() : 1.0;
  // Note [loss over counted targets]: the same N on every rank.
  const int64_t counted = data.global_counted_targets(step);
  if (counted == 0) return skip_empty_step(step_start);

  model->train();
  const bool profiled = profiler != nullptr && step >= options.profile_from_step;
  if (profiled) profiler->begin_step(step);
  StepTimes times;  // Note [step split]
  engine->begin_step();
  // Without clipping or loss scaling the update is known before the backward: the engine may start
  // it as gradients become final (Note [host adam overlap]). With them, it may speculate on the
  // update of a step that neither clips nor overflows (Note [speculative adam]): always, or where
  // the run's figures say it is faster (Note [speculation by cost]).
  if (config.gradient_clipping <= 0 && !config.fp16.enabled) {
    engine->expect_update(schedule.at(step), 1.0);
  } else if (speculation.speculates()) {
    engine->speculate_update(schedule.at(step), 1.0 / loss_scale, config.gradient_clipping);
  }
  double loss_sum = 0;
  {
    model::ScopedModuleHooks hooks(engine->hooks());
    for (int64_t micro = 1; micro <= accumulation; ++micro) {
      const data::Batch batch = data.train->batch(step, micro);
      const auto forward_start = Clock::now();
      const MicroLoss loss = micro_loss(batch);
      loss_sum += loss.value.item<double>();
      // A mixture of experts' load-balancing loss joins the loss where the config asks for it
      // (Note [router aux loss]): per micro-batch as Hugging Face adds it to the mean
      // cross-entropy; records' sums are scaled by R / N below, so by N / (R·A) here.
      const model::CausalLM::AuxiliaryLoss aux = model->auxiliary_loss();
      metrics.routing.observe(model->expert_tokens(),
                              aux.value.defined() ? aux.value.detach() : torch::Tensor());
      if (micro == accumulation) hold_idle_experts();
      torch::Tensor total = loss.value;
      if (aux.value.defined() && aux.weight > 0) {
        const double scale = data.has_records() ? static_cast<double>(counted) /
                                                      static_cast<double>(world() * accumulation)
                                                : 1.0;
        total = total + aux.value * (aux.weight * scale);
      }
      const auto backward_start = Clock::now();
      times.forward_s += std::chrono::duration<double>(backward_start - forward_start).count();
      const double weight = data.has_records()
                                ? static_cast<double>(world()) / static_cast<double>(counted)
                                : 1.0 / static_cast<double>(accumulation);
      (total * (loss_scale * weight)).backward();
      engine->end_micro_batch();
      times.backward_s += seconds_since(backward_start);
      double rest_s = 0;
      if (abandonable && micro < accumulation &&
          abandon_step(times.forward_s + times.backward_s, micro, &rest_s)) {
        --step;
        metrics.routing = RoutingStats{};  // the abandoned micro-batches' routing
        at::Generator generator = at::detail::getDefaultCPUGenerator();
        generator.set_state(step_rng);
        log::end_status();
        log::info("stop requested: abandoning step ", step + 1, " after ", micro, " of ",
                  accumulation, " micro-batches (finishing it would take about ",
                  format_duration(rest_s), ")");
        return std::nullopt;
      }
    }
  }
  // The logged loss is the mean over the global batch's counted targets (token windows: the mean
  // of the micro-batches' means, every rank's share the same size).
  if (comm != nullptr) loss_sum = comm->all_reduce_sum(loss_sum);
  const double loss = data.has_records() ? loss_sum / static_cast<double>(counted)
                                         : loss_sum / static_cast<double>(accumulation * world());

  StepMetrics m;
  m.routing = metrics.routing.finish(comm);
  // A router that leaves experts without tokens for a whole step may be collapsing.
  if (m.routing && m.routing->idle_in_step > 0)
    log::warn("step ", step, ": ", m.routing->idle_in_step,
              " expert(s) received no token in the whole step; they keep their weights and Adam "
              "state, as torch's AdamW keeps a parameter without gradient (docs/engine.md, idle "
              "experts)");
  m.step = step;
  m.loss = loss;
  m.counted_targets = counted;
  m.loss_scale = loss_scale;
  m.lr = schedule.at(step);
  // The loss scale only touches gradients: a non-finite loss is divergence, not overflow.
  PSTAR_CHECK(std::isfinite(loss), NumericError, "step ", step, ": the loss is not finite (", loss,
              "); lower optimizer.params.lr, set gradient_clipping, or train in fp32",
              checkpoints->last_checkpoint_hint());
  const auto optimizer_start = Clock::now();
  m.grad_norm = engine->grad_norm(loss_scale);
  if (!std::isfinite(m.grad_norm) && config.fp16.enabled && scaler.is_dynamic()) {
    m.skipped = true;
    m.lr = 0;  // no update was made
    ++totals.skipped;
    log::warn("step ", step, ": gradient overflow at loss scale ", loss_scale, "; step skipped (",
              totals.skipped, totals.skipped == 1 ? " step" : " steps", " skipped so far)");
  } else {
    PSTAR_CHECK(std::isfinite(m.grad_norm), NumericError, "step ", step,
                ": the gradient norm is not finite (loss ", loss,
                "); lower optimizer.params.lr, set gradient_clipping, or train in fp32",
                checkpoints->last_checkpoint_hint());
    double multiplier = 1.0 / loss_scale;
    const bool clipped = config.gradient_clipping > 0 && m.grad_norm > config.gradient_clipping;
    if (clipped) multiplier *= config.gradient_clipping / (m.grad_norm + 1e-6);
    engine->update(m.lr, multiplier);
  }
  if (config.fp16.enabled) scaler.update(m.skipped);
  engine->end_step();
  times.optimizer_s = seconds_since(optimizer_start);
  engine->fill_metrics(m.engine);

  totals.tokens += tokens_per_step();
  m.tokens = totals.tokens;
  m.step_time_s = seconds_since(step_start);
  m.tokens_per_s = static_cast<double>(tokens_per_step()) / std::max(m.step_time_s, 1e-9);
  if (metrics.model_flops_per_step > 0)
    m.tflops = metrics.model_flops_per_step / std::max(m.step_time_s, 1e-9) / 1e12;
  m.times = times;
  record_speculation(m);
  // After the step's figures and before its checkpoint: the step's own time leaves it out.
  if (eval_due()) m.eval_loss = evaluate();
  if (samples_due()) m.eval_samples = sample();
  m.elapsed_s = seconds_since(*start);
  record(m);
  if (profiled) profiler->end_step(m);
  const auto& t = config.training;
  if (!t.save_dir.empty() && t.save_interval > 0 &&
      (step % t.save_interval == 0 || step == t.steps))
    save_checkpoint();
  return m;
}

}  // namespace pstar::train
