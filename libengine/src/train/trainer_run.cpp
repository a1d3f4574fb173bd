// The run loop (progress, the summary) and `pstar train`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "pstar/base/format.h"
#include "pstar/base/size.h"
#include "pstar/core/clock.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/core/setup_phases.h"
#include "pstar/dist/communicator.h"
#include "pstar/dist/world.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"
#include "pstar/plan/run_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/run_facts.h"
#include "pstar/train/step_bound.h"
#include "same_config.h"
#include "torch_trace.h"
#include "trainer_impl.h"

namespace pstar::train {

using core::Clock;
using core::seconds_since;

namespace {

// Note [step bound]: large enough on a GPU for the copies and the matmul to reach their rates;
// small on the CPU, where they only show that the line is made.
RateSizes bound_sizes(bool gpu) {
  RateSizes sizes;
  if (!gpu) {
    sizes.copy_bytes = int64_t{16} << 20;
    sizes.matmul_side = 256;
    sizes.host_bytes = int64_t{32} << 20;
  }
  return sizes;
}

// After the engine is released, on a tier of the run's kind with a small arena of its own.
void log_step_bound(const PreparedRun::BoundInputs& in, const TrainSummary& summary) {
  const auto start = Clock::now();
  const MachineRates rates = [&] {
    std::unique_ptr<tier::DeviceTier> tier = in.device.is_cuda()
                                                 ? tier::make_device_tier(in.device, in.arena_bytes)
                                                 : tier::make_emulated_tier();
    return measure_rates(*tier, in.half, bound_sizes(in.device.is_cuda()));
  }();
  StepWork work = summary.steady_work;
  work.model_flops = in.model_flops_per_step;
  const StepBound bound = step_bound(work, rates);
  log::info(
      "step bound over ", summary.steady_steps,
      " steady step(s): ", describe_bound(summary.steady_step_s, bound), "; per step ",
      work.model_flops >= 1e12 ? format_fixed(work.model_flops / 1e12, 2) + " TFLOP, "
                               : format_fixed(work.model_flops / 1e9, 2) + " GFLOP, ",
      format_bytes(work.h2d_bytes), " up, ", format_bytes(work.d2h_bytes), " down, ",
      format_bytes(work.host_adam_bytes), " of host Adam, ", format_bytes(work.norm_host_bytes),
      " of the gradient norm's reads; rates measured after the run in ",
      format_fixed(seconds_since(start), 2), " s: matmul ",
      format_fixed(rates.compute_flops / 1e12, 2), " TFLOPS, copies ",
      format_fixed(rates.h2d_bytes / 1e9, 1), " GB/s up, ", format_fixed(rates.d2h_bytes / 1e9, 1),
      " down, ", format_fixed(rates.two_way_bytes / 1e9, 1), " both at once, host memory ",
      format_fixed(rates.host_memory_bytes / 1e9, 1), " GB/s");
}

}  // namespace

TrainSummary Trainer::run() {
  Impl& s = *impl_;
  const int64_t total = s.config.training.steps;
  TrainSummary summary;
  if (s.step >= total) {
    log::info("nothing to train: already at step ", s.step, " of training.steps ", total);
    return summary;
  }
  log::info("training ", total - s.step, " steps");
  int64_t device_peak = -1, host_peak = -1, moved = 0, adam_device = -1;
  bool loss_seen = false;
  // Note [step bound]: the steps after the warm-up's tracing and the first planned step.
  const int64_t first_steady = s.config.engine.warmup_iterations + 2;
  std::vector<double> steady_times;
  const auto run_start = Clock::now();
  const int64_t tokens_before = s.totals.tokens;
  // Note [torch trace]
  std::optional<TorchTrace> trace;
  if (std::optional<TorchTraceRequest> request = torch_trace_request_from_env()) {
    request->path = s.rank_path(request->path);
    trace.emplace(std::move(*request), s.device.is_cuda());
  }
  while (s.step < total) {
    if (trace) trace->before_step(s.step + 1);
    std::optional<StepMetrics> done = s.run_step(/*may_abandon=*/true);
    if (trace && done) trace->after_step(done->step);
    if (!done) {
      s.stop_after(s.step);
      break;
    }
    const StepMetrics& m = *done;
    device_peak = std::max(device_peak, m.engine.device_peak_bytes);
    host_peak = std::max(host_peak, m.engine.host_peak_bytes);
    moved += std::max<int64_t>(0, m.engine.moved_h2d_bytes) +
             std::max<int64_t>(0, m.engine.moved_d2h_bytes);
    adam_device = m.engine.adam.device_chunks;
    if (m.step >= first_steady && m.engine.moved_h2d_bytes >= 0 && !m.skipped) {
      steady_times.push_back(m.step_time_s);
      summary.steady_work.h2d_bytes += m.engine.moved_h2d_bytes;
      summary.steady_work.d2h_bytes += m.engine.moved_d2h_bytes;
      summary.steady_work.host_adam_bytes += m.engine.adam.host_bytes;
      summary.steady_work.norm_host_bytes += std::max<int64_t>(0, m.engine.adam.norm_host_bytes);
    }
    // A step skipped for want of counted targets has no loss (NaN).
    if (std::isfinite(m.loss)) {
      if (!loss_seen) summary.first_loss = m.loss;
      loss_seen = true;
      summary.last_loss = m.loss;
    }
    if (m.eval_loss) summary.last_eval_loss = m.eval_loss;
    ++summary.steps;
    if (s.options.progress) {
      const double per_step = seconds_since(run_start) / static_cast<double>(summary.steps);
      const double eta = per_step * static_cast<double>(total - m.step);
      char line[256];
      std::snprintf(
          line, sizeof line, "step %lld/%lld  loss %.4f%s  lr %.2e  %s tok/s  %s  ETA %s",
          static_cast<long long>(m.step), static_cast<long long>(total), m.loss,
          m.eval_loss ? str_cat("  eval_loss ", format_fixed(*m.eval_loss, 4)).c_str() : "", m.lr,
          format_count(m.tokens_per_s).c_str(), format_duration(m.elapsed_s).c_str(),
          format_duration(eta).c_str());
      // An evaluated step is always logged: its held-out loss stays in the log.
      if (s.logged_step(m)) {
        log::end_status();
        log::info(line);
      } else {
        log::status(line);
      }
    }
    if (m.step < total && s.agree_to_stop()) {
      s.stop_after(m.step);
      break;
    }
  }
  log::end_status();
  if (s.metrics.tensorboard) s.metrics.tensorboard->flush();
  if (s.profiler) {
    const std::string path = s.rank_path(s.options.profile_path);
    s.profiler->write(path);
    log::info("profile: ", path, " (", s.profiler->data().steps.size(), " steps, ",
              s.profiler->data().by_moment.size(), " moments, ", s.profiler->data().events.size(),
              " chunk events)");
  }
  summary.skipped_steps = s.totals.skipped;
  if (!steady_times.empty()) {
    const auto n = static_cast<int64_t>(steady_times.size());
    summary.steady_steps = n;
    std::sort(steady_times.begin(), steady_times.end());
    summary.steady_step_s = steady_times[steady_times.size() / 2];
    summary.steady_work.h2d_bytes /= n;
    summary.steady_work.d2h_bytes /= n;
    summary.steady_work.host_adam_bytes /= n;
    summary.steady_work.norm_host_bytes /= n;
  }
  summary.stop_signal = s.stop_signal;
  summary.tokens = s.totals.tokens - tokens_before;
  summary.elapsed_s = seconds_since(run_start);
  summary.tokens_per_s = static_cast<double>(summary.tokens) / std::max(summary.elapsed_s, 1e-9);
  if (device_peak >= 0) {
    log::info("chunk engine: device peak ", format_bytes(device_peak), ", host peak ",
              format_bytes(host_peak), ", moved ",
              format_bytes(moved / std::max<int64_t>(1, summary.steps)),
              " per step on average, Adam on the device for ", adam_device, " chunk(s)");
  }
  log::info(s.stop_signal != 0 ? "stopped: " : "done: ", summary.steps, " steps, ",
            format_count(static_cast<double>(summary.tokens)), " tokens in ",
            format_duration(summary.elapsed_s), " (", format_count(summary.tokens_per_s),
            " tok/s); loss ", format_fixed(summary.first_loss, 4), " -> ",
            format_fixed(summary.last_loss, 4),
            summary.last_eval_loss
                ? str_cat(", held-out ", format_fixed(*summary.last_eval_loss, 4))
                : "",
            summary.skipped_steps ? str_cat("; ", summary.skipped_steps, " skipped") : "");
  return summary;
}

PreparedRun prepare_run(const config::TrainConfig& config, const TrainOptions& options) {
  const dist::WorldInfo world = dist::detect_world();
  PreparedRun run;
  TrainOptions run_options = options;
  core::SetupPhases phases;  // Note [set-up phases]
  core::PhaseTimer ranks_timer(&phases, core::SetupPhase::kRanks);
  const bool info_wanted = log::level() <= log::Level::kInfo;  // before ranks > 0 lower it
  if (world.distributed()) {
    log::set_rank(static_cast<int>(world.rank), static_cast<int>(world.world_size));
    // One rank speaks for the run; the others report only warnings and errors.
    if (world.rank != 0 && log::level() < log::Level::kWarn) log::set_level(log::Level::kWarn);
    run_options.progress = options.progress && world.rank == 0;
    log::info("rank ", world.rank, " of ", world.world_size, " (", world.launcher,
              "), rendezvous at ", world.master_addr, ":", world.port);
    run.comm = dist::connect_gloo(world, options.dist_timeout);
    check_same_config(*run.comm, config);
    run_options.comm = run.comm.get();
  }
  ranks_timer.stop();
  log::info("config: ", config.source);
  core::PhaseTimer plan_timer(&phases, core::SetupPhase::kPlan);
  // Note [numa binding]: before the thread pools and the payloads exist; every rank says where.
  const NumaReport numa = bind_rank_to_numa(
      config, rank_device(config, options.device, world.local_rank, world.local_world_size),
      world.local_rank, world.local_world_size);
  if (numa.notable && info_wanted)
    log::write(log::Level::kInfo, numa.line);
  else
    log::debug(numa.line);
  core::configure_runtime(world.local_world_size);  // before the precision probe, which it times
  // The run's shape, decided once (Note [run plan]); the Trainer finds nothing left to decide.
  const plan::RunPlan plan = plan_run(config, options.device, run.comm.get());
  for (const std::string& line : plan.decisions) log::info(line);
  // Each rank names its own device (Note [rank device]), so that the log shows which rank computes
  // where, though ranks other than 0 otherwise report only warnings.
  if (world.distributed() && info_wanted) log::write(log::Level::kInfo, plan.rank.describe());
  // Note [device collectives]: the Gloo communicator joined the ranks and checked their configs;
  // on GPUs the chunk groups move over NCCL, which rendezvous through its store.
  if (world.distributed() && plan.rank.backend == plan::CommBackend::kNccl) {
    run.comm = dist::connect_nccl(std::move(run.comm), static_cast<int>(plan.rank.index),
                                  options.dist_timeout);
    run_options.comm = run.comm.get();
  }
  plan_timer.stop();
  const config::TrainConfig& resolved = plan.config;
  ModelAndEngine built = build_model_and_engine(plan, run.comm.get());
  built.setup.merge(phases);
  // Every rank built the same initial model from training.seed; from here on (dropout) each
  // rank draws its own numbers. Rank 0 keeps the stream a single-rank run would.
  if (world.rank > 0) torch::manual_seed(config.training.seed + 7919 * world.rank);
  run.trainer = std::make_unique<Trainer>(resolved, std::move(built), run_options);
  const bool on_gpu = plan.device == plan::DeviceKind::kCuda;
  if (plan.chunked && world.rank == 0 && options.step_bound.value_or(on_gpu)) {
    PreparedRun::BoundInputs b;
    b.device = plan_device(plan);
    b.half = plan.compute_elem_bytes() == 2;
    const RateSizes sizes = bound_sizes(on_gpu);
    b.arena_bytes = 2 * sizes.copy_bytes + (int64_t{4} << 20);
    const model::ModelShape shape = model::resolve_model_shape(resolved.model);
    b.model_flops_per_step =
        plan::model_flops_per_token(shape) *
        static_cast<double>(plan.micro_batch * plan.accumulation * shape.seq_len());
    run.bound = b;
  }
  return run;
}

TrainSummary train(const config::TrainConfig& config, const TrainOptions& options) {
  const auto start = Clock::now();
  PreparedRun run = prepare_run(config, options);
  run.trainer->finish_setup(seconds_since(start));
  const TrainSummary summary = run.trainer->run();
  // Releasing the model data (pinned host memory in particular) can take long too. Measured here,
  // not guessed: a run that lingers after "done" says where its time went.
  const auto teardown = Clock::now();
  run.trainer.reset();
  // Logged whatever it took: beside "set-up took" it closes the account of time outside the steps.
  log::info("released the engine's memory in ", format_fixed(seconds_since(teardown), 2), " s");
  if (run.bound && summary.steady_steps > 0) log_step_bound(*run.bound, summary);
  return summary;
}

}  // namespace pstar::train
