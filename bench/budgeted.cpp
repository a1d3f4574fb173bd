// Training a model whose model data is several times the chunk engine's device budget: the same
// GPT trained unconstrained (engine.device_memory unset, every chunk in the device margin) and
// under engine.device_memory = model data / --ratio, in the same run. Reports the budgeted run's
// throughput against the unconstrained one, the bytes it moves per step, its device peak against
// the budget, and whether its losses are bit-identical to the unconstrained run's (placement must
// never change the numbers). The last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-budgeted [--steps 10] [--warmup 3] [--ratio 4.5]
//       [--rounds 2] [--prefetch 1]
//
// The model is parameter-heavy and activation-light (hidden 512, 8 layers, seq_len 32, micro batch
// 2, bf16, embeddings managed like every other module) so that the budget is dominated by chunks,
// not activations. The device tier is emulated on the CPU in this build.
//
// A first unconstrained run, alone, measures model data and the non-model peak the budget is
// derived from, and gives the reference losses. Then each round builds both trainers and
// interleaves their steps: an unconstrained and a budgeted step make a pair, and which goes first
// alternates. The two steps of a pair see nearly the same moment of a shared machine, whose other
// processes slow some steps down by several times, so the headline ratio is the median over the
// pairs of (unconstrained step time / budgeted step time). Each mode's tokens/s is tokens per step
// over its fastest steady-state step, with the median beside it. Exit status 1 when the budget was
// exceeded or a loss differed.
//
// Note [copy bound]
// On the emulated tier a move is one memcpy of a payload into a block of the tier's pool, so the
// least a budgeted step can cost beyond the unconstrained one is the time to copy the bytes it
// moves, and nothing else (no allocation, page fault, zeroing or bookkeeping should show). The
// bound copies exactly a step's moved bytes payload by payload, with one thread as the tier does,
// between warm buffers of the compute payload's size from a memory::HostPool, the tier's own
// allocator, and touches the memory a step's moves touch: a "host" and a "device" set of buffers,
// one per payload a step uploads (or evicts, if more), and each pass copies the step's uploads from
// the host set into the device set, then its evictions back from the device set into the host set,
// as the pools hand a freed block to the next move the other way. (Distinct buffers for every copy
// would touch twice that memory: a looser bound.) It runs after every steady-state step pair, so it
// sees the same moments of a shared machine as the steps do, and meets the caches as a step's moves
// do, after compute has been through them: the headline move_cost_over_copy_bound is the median
// over the pairs of (budgeted - unconstrained step time) over the median time of that pass. A
// second pass right after it finds the buffers in the caches the first one filled; its figure
// (move_cost_over_warm_copy_bound) is reported beside.
//
// Note [two engines, one counter]
// The chunk engine measures non-model memory with a process-wide counter of LibTorch's CPU
// allocations (pstar/memory/cpu_counter.h), read as a peak between its moments. With two trainers
// interleaved, one engine's window from its optimizer step to its next forward would also span the
// other trainer's whole step. Every step therefore starts a fresh peak window: in a trainer alone,
// nothing is allocated between the optimizer step and the next step, so each engine measures what
// it would measure alone (and its bytes moved, device peak and losses match a run alone).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/base/error.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/memory/host_pool.h"
#include "pstar/train/run_facts.h"
#include "pstar/train/trainer.h"

namespace {

using pstar::bench::TempCorpus;

struct Options {
  int64_t steps = 10;
  int64_t warmup = 3;    // steps left out of the steady-state figures (the first is the engine's)
  int64_t rounds = 2;    // each trains both modes, their steps interleaved
  double ratio = 4.5;    // model data / device budget
  bool prefetch = true;  // engine.prefetch (Note [prefetch])
};

struct RunResult {
  std::vector<pstar::train::StepMetrics> steps;
  int64_t num_chunks = 0;
  int64_t chunk_size = 0;
  int64_t compute_chunk_bytes = 0;
  int64_t optimizer_chunk_bytes = 0;
  int64_t device_budget_bytes = 0;
  int64_t margin_chunks = 0;
  int64_t non_model_peak_bytes = 0;  // max of the trace's per-moment non-model peaks
  int64_t chunk_elements = 0;        // all chunks' (they may differ in size)

  int64_t model_data_bytes() const {
    return chunk_elements * (compute_chunk_bytes + optimizer_chunk_bytes) / chunk_size;
  }
};

// One trainer and the metrics of its steps.
class Training {
 public:
  explicit Training(const pstar::config::TrainConfig& config)
      : config_(std::make_unique<pstar::config::TrainConfig>(config)) {
    // The chunk engine keeps a reference to the config it was built from: it lives on the heap
    // with the trainer.
    pstar::train::TrainOptions options;
    options.device = "cpu";
    options.progress = false;
    auto built =
        pstar::train::build_model_and_engine(pstar::train::plan_run(*config_, "cpu", nullptr));
    engine_ = dynamic_cast<const pstar::engine::ChunkedEngine*>(built.engine.get());
    PSTAR_INTERNAL_ASSERT(engine_ != nullptr, "engine.mode \"chunked\" built no chunk engine");
    trainer_ = std::make_unique<pstar::train::Trainer>(*config_, std::move(built), options);
  }

  // Returns the step's seconds.
  double step() {
    // Note [two engines, one counter]
    pstar::memory::CpuAllocationCounter::instance().reset_peak();
    result_.steps.push_back(trainer_->step());
    return result_.steps.back().step_time_s;
  }

  const pstar::train::StepMetrics& last() const { return result_.steps.back(); }

  RunResult result() const {
    RunResult r = result_;
    r.num_chunks = engine_->num_chunks();
    r.chunk_size = engine_->chunk_size();
    for (int64_t size : engine_->chunk_sizes()) r.chunk_elements += size;
    r.compute_chunk_bytes = engine_->compute_chunk_bytes();
    r.optimizer_chunk_bytes = engine_->optimizer_chunk_bytes();
    r.device_budget_bytes = engine_->device_budget_bytes();
    r.margin_chunks = engine_->margin_chunks();
    for (int64_t bytes : engine_->trace().non_model_bytes)
      r.non_model_peak_bytes = std::max(r.non_model_peak_bytes, bytes);
    return r;
  }

 private:
  std::unique_ptr<pstar::config::TrainConfig> config_;
  std::unique_ptr<pstar::train::Trainer> trainer_;
  const pstar::engine::ChunkedEngine* engine_ = nullptr;
  RunResult result_;
};

// Figures over the steady-state steps (after the warm-up).
struct Steady {
  double h2d_per_step = 0, d2h_per_step = 0;
  double prefetched_per_step = 0;  // of h2d: copied a moment ahead (Note [prefetch])
  int64_t h2d_min = 0, h2d_max = 0, d2h_min = 0, d2h_max = 0;
  int64_t device_peak_max = 0;     // over every step, warm-up included
  int64_t adam_device_chunks = 0;  // the last step's
};

Steady steady(const RunResult& r, int64_t warmup) {
  Steady s;
  int64_t h2d = 0, d2h = 0, prefetched = 0, n = 0;
  s.h2d_min = s.d2h_min = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const auto& m = r.steps[i];
    s.device_peak_max = std::max(s.device_peak_max, m.engine.device_peak_bytes);
    if (static_cast<int64_t>(i) < warmup) continue;
    h2d += m.engine.moved_h2d_bytes;
    d2h += m.engine.moved_d2h_bytes;
    prefetched += m.engine.prefetched_h2d_bytes;
    s.h2d_min = std::min(s.h2d_min, m.engine.moved_h2d_bytes);
    s.h2d_max = std::max(s.h2d_max, m.engine.moved_h2d_bytes);
    s.d2h_min = std::min(s.d2h_min, m.engine.moved_d2h_bytes);
    s.d2h_max = std::max(s.d2h_max, m.engine.moved_d2h_bytes);
    ++n;
  }
  s.h2d_per_step = static_cast<double>(h2d) / static_cast<double>(n);
  s.d2h_per_step = static_cast<double>(d2h) / static_cast<double>(n);
  s.prefetched_per_step = static_cast<double>(prefetched) / static_cast<double>(n);
  s.adam_device_chunks = r.steps.back().engine.adam.device_chunks;
  return s;
}

// Note [copy bound]
class CopyBound {
 public:
  CopyBound(int64_t payload_bytes, int64_t uploads, int64_t evictions)
      : payload_bytes_(payload_bytes), uploads_(uploads), evictions_(evictions) {
    for (int64_t i = 0; i < std::max(uploads, evictions); ++i) {
      host_.push_back(pool_.acquire(payload_bytes));
      device_.push_back(pool_.acquire(payload_bytes));
      std::memset(host_.back().data(), 1, static_cast<size_t>(payload_bytes));
      std::memset(device_.back().data(), 2, static_cast<size_t>(payload_bytes));
    }
    for (int i = 0; i < 2; ++i) run();  // warm
  }

  // Seconds for one step's copies.
  double run() {
    const auto begin = std::chrono::steady_clock::now();
    const auto n = static_cast<size_t>(payload_bytes_);
    for (size_t i = 0; i < static_cast<size_t>(uploads_); ++i)
      std::memcpy(device_[i].data(), host_[i].data(), n);
    for (size_t i = 0; i < static_cast<size_t>(evictions_); ++i)
      std::memcpy(host_[i].data(), device_[i].data(), n);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }

  int64_t bytes() const { return payload_bytes_ * (uploads_ + evictions_); }

 private:
  int64_t payload_bytes_, uploads_, evictions_;
  pstar::memory::HostPool pool_;
  std::vector<pstar::memory::HostBlock> host_, device_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

int run(const Options& o) {
  pstar::core::configure_runtime();
  pstar::log::set_level(pstar::log::Level::kWarn);

  // Random bytes: the data does not matter here, only that both runs see the same batches.
  const TempCorpus corpus("budgeted");
  pstar::config::TrainConfig config;
  config.model.hidden = 512;
  config.model.layers = 8;
  config.model.heads = 8;
  config.model.vocab_size = 256;
  config.model.seq_len = 32;
  config.data.text = corpus.path.string();
  config.train_micro_batch_size_per_gpu = 2;
  config.bf16.enabled = pstar::config::OnOffAuto::kOn;
  config.use_cpu_embedding =
      pstar::config::OnOffAuto::kOff;  // embeddings live in chunks and count against the budget
  // Small against the budget: the largest module (c_fc, 4h² + 4h = 1,050,624 parameters) rounded
  // up to a multiple of 64K elements, which is what the engine would raise 1 << 20 to anyway.
  config.default_chunk_size = 17 * (int64_t{1} << 16);
  config.engine.mode = pstar::config::EngineMode::kChunked;
  config.training.steps = o.steps;
  config.engine.prefetch = o.prefetch;

  // The reference: unconstrained and alone.
  RunResult reference;
  {
    Training alone(config);
    for (int64_t i = 0; i < o.steps; ++i) alone.step();
    reference = alone.result();
  }
  const int64_t model_data = reference.model_data_bytes();
  const int64_t budget = static_cast<int64_t>(static_cast<double>(model_data) / o.ratio);
  const int64_t floor = reference.non_model_peak_bytes + 4 * reference.compute_chunk_bytes;
  PSTAR_CHECK(budget >= floor, ConfigError, "a budget of model data / ", o.ratio, " = ", budget,
              " bytes is below the measured non-model peak ", reference.non_model_peak_bytes,
              " + 4 chunks of ", reference.compute_chunk_bytes, " bytes; lower --ratio");
  pstar::config::TrainConfig budgeted_config = config;
  budgeted_config.engine.device_memory = budget;

  std::vector<RunResult> free_runs, budgeted_runs;
  std::vector<double> free_seconds, budgeted_seconds, pair_ratios, pair_extra, copy_seconds,
      warm_copy_seconds, move_seconds;
  std::unique_ptr<CopyBound> bound;
  for (int64_t round = 0; round < o.rounds; ++round) {
    Training free_training(config);
    Training budgeted_training(budgeted_config);
    for (int64_t i = 0; i < o.steps; ++i) {
      double free_s = 0, budgeted_s = 0;
      if ((i + round) % 2 == 0) {
        free_s = free_training.step();
        budgeted_s = budgeted_training.step();
      } else {
        budgeted_s = budgeted_training.step();
        free_s = free_training.step();
      }
      if (i < o.warmup) continue;
      free_seconds.push_back(free_s);
      budgeted_seconds.push_back(budgeted_s);
      pair_ratios.push_back(free_s / budgeted_s);
      pair_extra.push_back(budgeted_s - free_s);
      move_seconds.push_back(budgeted_training.last().engine.move_s);
      // Note [copy bound]: sized by the first steady-state step's moves.
      if (!bound) {
        const auto& moved = budgeted_training.last();
        const int64_t payload = reference.compute_chunk_bytes;
        bound = std::make_unique<CopyBound>(payload,
                                            (moved.engine.moved_h2d_bytes + payload - 1) / payload,
                                            (moved.engine.moved_d2h_bytes + payload - 1) / payload);
      }
      copy_seconds.push_back(bound->run());
      warm_copy_seconds.push_back(bound->run());
    }
    free_runs.push_back(free_training.result());
    budgeted_runs.push_back(budgeted_training.result());
  }
  const RunResult& budgeted = budgeted_runs.front();
  const RunResult& free_run = free_runs.front();

  auto same = [&](const RunResult& r, double pstar::train::StepMetrics::*field) {
    if (r.steps.size() != reference.steps.size()) return false;
    for (size_t i = 0; i < r.steps.size(); ++i)
      if (!(r.steps[i].*field == reference.steps[i].*field)) return false;
    return true;
  };
  bool losses_identical = true, grad_norms_identical = true, free_deterministic = true;
  for (const RunResult& r : budgeted_runs) {
    losses_identical = losses_identical && same(r, &pstar::train::StepMetrics::loss);
    grad_norms_identical = grad_norms_identical && same(r, &pstar::train::StepMetrics::grad_norm);
  }
  for (const RunResult& r : free_runs)
    free_deterministic = free_deterministic && same(r, &pstar::train::StepMetrics::loss);
  // Placement is planned from the measured trace, so every budgeted run should move the same bytes.
  bool budgeted_runs_agree = true;
  for (const RunResult& r : budgeted_runs)
    for (size_t i = 0; i < r.steps.size(); ++i)
      budgeted_runs_agree =
          budgeted_runs_agree &&
          r.steps[i].engine.moved_h2d_bytes == budgeted.steps[i].engine.moved_h2d_bytes &&
          r.steps[i].engine.moved_d2h_bytes == budgeted.steps[i].engine.moved_d2h_bytes &&
          r.steps[i].engine.device_peak_bytes == budgeted.steps[i].engine.device_peak_bytes;

  const Steady bs = steady(budgeted, o.warmup);
  int64_t peak = 0;
  for (const RunResult& r : budgeted_runs)
    peak = std::max(peak, steady(r, o.warmup).device_peak_max);
  const bool within_budget = peak <= budget;
  const auto tokens_per_step =
      static_cast<double>(budgeted.steps[1].tokens - budgeted.steps[0].tokens);
  const double free_best =
      tokens_per_step / *std::min_element(free_seconds.begin(), free_seconds.end());
  const double budgeted_best =
      tokens_per_step / *std::min_element(budgeted_seconds.begin(), budgeted_seconds.end());
  const double free_median = tokens_per_step / median(free_seconds);
  const double budgeted_median = tokens_per_step / median(budgeted_seconds);
  const double ratio = median(pair_ratios);
  // Note [copy bound]
  const double moved_per_step = bs.h2d_per_step + bs.d2h_per_step;
  const double copy_gbps = static_cast<double>(bound->bytes()) / median(copy_seconds) / 1e9;
  const double copy_best_gbps = static_cast<double>(bound->bytes()) /
                                *std::min_element(copy_seconds.begin(), copy_seconds.end()) / 1e9;
  const double copy_bound_s = moved_per_step / (copy_gbps * 1e9);
  const double extra_s = median(pair_extra);
  const double over_bound = extra_s / copy_bound_s;
  const double warm_copy_gbps =
      static_cast<double>(bound->bytes()) / median(warm_copy_seconds) / 1e9;
  const double over_warm_bound = extra_s / (moved_per_step / (warm_copy_gbps * 1e9));
  const double move_s = median(move_seconds);  // the engine's own time in moves

  std::printf(
      "budgeted chunk-engine training, GPT hidden 512, 8 layers, seq_len 32, batch 2, bf16, %d "
      "threads\n",
      torch::get_num_threads());
  std::printf(
      "  model data %.1f MiB (%lld chunks of %lld elements: %.2f MiB compute + %.2f MiB "
      "optimizer each); measured non-model peak %.2f MiB\n",
      mib(static_cast<double>(model_data)), static_cast<long long>(reference.num_chunks),
      static_cast<long long>(reference.chunk_size),
      mib(static_cast<double>(reference.compute_chunk_bytes)),
      mib(static_cast<double>(reference.optimizer_chunk_bytes)),
      mib(static_cast<double>(reference.non_model_peak_bytes)));
  std::printf("  device budget %.1f MiB = model data / %.2f (unconstrained: %.1f MiB)\n",
              mib(static_cast<double>(budget)),
              static_cast<double>(model_data) / static_cast<double>(budget),
              mib(static_cast<double>(reference.device_budget_bytes)));
  std::printf(
      "  step  loss unconstrained   loss budgeted        time s (unc/bud)  h2d MiB  d2h MiB  "
      "device peak MiB  Adam on device   (reference run; round 1)\n");
  for (size_t i = 0; i < budgeted.steps.size(); ++i) {
    const auto& f = reference.steps[i];
    const auto& b = budgeted.steps[i];
    std::printf("  %4lld  %-19.17g  %-19.17g  %7.3f / %-7.3f  %7.1f  %7.1f  %15.1f  %lld/%lld%s\n",
                static_cast<long long>(b.step), f.loss, b.loss, free_run.steps[i].step_time_s,
                b.step_time_s, mib(static_cast<double>(b.engine.moved_h2d_bytes)),
                mib(static_cast<double>(b.engine.moved_d2h_bytes)),
                mib(static_cast<double>(b.engine.device_peak_bytes)),
                static_cast<long long>(b.engine.adam.device_chunks),
                static_cast<long long>(budgeted.num_chunks),
                static_cast<int64_t>(i) < o.warmup ? "  (warm-up)" : "");
  }
  std::printf(
      "  unconstrained: %8.0f tokens/s (fastest step; median %.0f), %lld of %lld chunks in the "
      "device margin\n",
      free_best, free_median, static_cast<long long>(free_run.margin_chunks),
      static_cast<long long>(free_run.num_chunks));
  std::printf(
      "  budgeted:      %8.0f tokens/s (fastest step; median %.0f), %lld of %lld chunks in the "
      "device margin\n",
      budgeted_best, budgeted_median, static_cast<long long>(budgeted.margin_chunks),
      static_cast<long long>(budgeted.num_chunks));
  std::printf(
      "  budgeted / unconstrained: %.3f (median of %zu interleaved step pairs; fastest steps "
      "%.3f, median steps %.3f)\n",
      ratio, pair_ratios.size(), budgeted_best / free_best, budgeted_median / free_median);
  std::printf(
      "  moved per steady-state step: h2d %.1f MiB (%.1f..%.1f; %.1f MiB of it prefetched), d2h "
      "%.1f MiB (%.1f..%.1f); the %zu budgeted runs %s\n",
      mib(bs.h2d_per_step), mib(static_cast<double>(bs.h2d_min)),
      mib(static_cast<double>(bs.h2d_max)), mib(bs.prefetched_per_step), mib(bs.d2h_per_step),
      mib(static_cast<double>(bs.d2h_min)), mib(static_cast<double>(bs.d2h_max)),
      budgeted_runs.size(), budgeted_runs_agree ? "agree" : "DISAGREE");
  std::printf(
      "  memcpy of %.1f MiB in %.2f MiB payloads (%zu measurements between the pairs): %.2f GB/s "
      "(median; best %.2f GB/s): copy bound %.2f ms per step\n",
      mib(static_cast<double>(bound->bytes())),
      mib(static_cast<double>(reference.compute_chunk_bytes)), copy_seconds.size(), copy_gbps,
      copy_best_gbps, 1e3 * copy_bound_s);
  std::printf(
      "  budgeted - unconstrained step time: %.2f ms (median of %zu pairs) = %.3f x the copy "
      "bound (%.3f x a second, warm pass at %.2f GB/s); the engine's own time in moves (copy, "
      "allocation, re-pointing): %.2f ms a step (median)\n",
      1e3 * extra_s, pair_extra.size(), over_bound, over_warm_bound, warm_copy_gbps, 1e3 * move_s);
  std::printf(
      "  device peak %.1f MiB %s the budget; budgeted losses %s, gradient norms %s (every "
      "budgeted run against the reference run; the %zu other unconstrained runs %s)\n",
      mib(static_cast<double>(peak)), within_budget ? "within" : "OVER",
      losses_identical ? "bit-identical" : "DIFFER",
      grad_norms_identical ? "bit-identical" : "DIFFER", free_runs.size(),
      free_deterministic ? "agree" : "DISAGREE");
  std::fflush(stdout);
  if (!within_budget || !losses_identical)
    std::fprintf(stderr, "pstar-bench-budgeted: the budgeted run %s\n",
                 !within_budget ? "exceeded its device budget" : "changed the losses");

  nlohmann::json result = {
      {"bench", "budgeted"},
      {"steps", o.steps},
      {"warmup_steps", o.warmup},
      {"rounds", o.rounds},
      {"prefetch", o.prefetch},
      {"num_chunks", budgeted.num_chunks},
      {"chunk_size", budgeted.chunk_size},
      {"model_data_bytes", model_data},
      {"non_model_peak_bytes", reference.non_model_peak_bytes},
      {"device_memory_bytes", budget},
      {"model_data_over_device", static_cast<double>(model_data) / static_cast<double>(budget)},
      {"tokens_per_s", budgeted_best},
      {"unconstrained_tokens_per_s", free_best},
      {"ratio_vs_unconstrained", ratio},
      {"fastest_step_ratio_vs_unconstrained", budgeted_best / free_best},
      {"median_tokens_per_s", budgeted_median},
      {"unconstrained_median_tokens_per_s", free_median},
      {"median_step_ratio_vs_unconstrained", budgeted_median / free_median},
      {"moved_h2d_bytes_per_step", bs.h2d_per_step},
      {"moved_d2h_bytes_per_step", bs.d2h_per_step},
      {"prefetched_h2d_bytes_per_step", bs.prefetched_per_step},
      {"copy_gb_per_s", copy_gbps},
      {"copy_best_gb_per_s", copy_best_gbps},
      {"copy_bound_s", copy_bound_s},
      {"extra_step_s", extra_s},
      {"move_cost_over_copy_bound", over_bound},
      {"copy_warm_gb_per_s", warm_copy_gbps},
      {"move_cost_over_warm_copy_bound", over_warm_bound},
      {"engine_move_s", move_s},
      {"device_peak_bytes", peak},
      {"peak_within_budget", within_budget},
      {"margin_chunks", budgeted.margin_chunks},
      {"adam_device_chunks", bs.adam_device_chunks},
      {"losses_bit_identical", losses_identical},
      {"grad_norms_bit_identical", grad_norms_identical},
      {"unconstrained_runs_agree", free_deterministic},
      {"budgeted_runs_agree", budgeted_runs_agree}};
  std::printf("%s\n", result.dump().c_str());
  return within_budget && losses_identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", argv[i]);
      return 2;
    }
    const std::string value = argv[i + 1];
    try {
      if (key == "--steps") {
        o.steps = std::stoll(value);
      } else if (key == "--warmup") {
        o.warmup = std::stoll(value);
      } else if (key == "--ratio") {
        o.ratio = std::stod(value);
      } else if (key == "--rounds") {
        o.rounds = std::stoll(value);
      } else if (key == "--prefetch") {
        o.prefetch = std::stoll(value) != 0;
      } else {
        std::fprintf(stderr, "unknown option %s\n", argv[i]);
        return 2;
      }
    } catch (const std::logic_error&) {  // std::stoll / std::stod: not a number
      std::fprintf(stderr, "option %s: '%s' is not a number\n", argv[i], value.c_str());
      return 2;
    }
  }
  if (o.warmup < 1 || o.steps <= o.warmup || o.ratio <= 1 || o.rounds < 1) {
    std::fprintf(stderr, "need --warmup >= 1, --steps > --warmup, --ratio > 1, --rounds >= 1\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const pstar::Error& e) {
    std::fprintf(stderr, "pstar-bench-budgeted: %s: %s\n", pstar::error_kind_name(e.kind()),
                 e.what());
    return pstar::error_exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pstar-bench-budgeted: %s\n", e.what());
    return 1;
  }
}
