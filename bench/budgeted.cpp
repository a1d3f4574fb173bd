// Training a model whose model data is several times the chunk engine's device budget: the same
// GPT trained unconstrained (engine.device_memory unset, every chunk in the device margin) and
// under engine.device_memory = model data / --ratio, in the same run. Reports the budgeted run's
// throughput against the unconstrained one, the bytes it moves per step, its device peak against
// the budget, and whether its losses are bit-identical to the unconstrained run's (placement must
// never change the numbers). The last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-budgeted [--steps 10] [--warmup 3] [--ratio 4.5]
//       [--rounds 3]
//
// The model is parameter-heavy and activation-light (hidden 512, 8 layers, seq_len 32, micro batch
// 2, bf16, embeddings managed like every other module) so that the budget is dominated by chunks,
// not activations. The device tier is emulated on the CPU in this build. Each round trains both
// runs (the order alternating, so both see the same moments of a shared machine); throughput is
// tokens per step over the fastest steady-state step of each mode's rounds (medians beside), and
// every run's losses are compared with the first unconstrained run's.
// Exit status 1 when the budget was exceeded or a loss differed.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/train/chunked_engine.h"
#include "pstar/train/trainer.h"

namespace {

// 1 MiB of random bytes in a temporary text file, removed when the benchmark ends.
struct TempCorpus {
  std::filesystem::path path;

  explicit TempCorpus(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("pstar-bench-" + name + "-" + std::to_string(::getpid()) + ".txt")) {
    std::ofstream out(path, std::ios::binary);
    std::mt19937 rng(1);
    for (int i = 0; i < (1 << 20); ++i) out.put(static_cast<char>(rng() % 256));
  }
  ~TempCorpus() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
  TempCorpus(const TempCorpus&) = delete;
  TempCorpus& operator=(const TempCorpus&) = delete;
};

struct Options {
  int64_t steps = 10;
  int64_t warmup = 3;  // steps left out of the steady-state figures (the first is the engine's)
  int64_t rounds = 3;  // each trains both modes once
  double ratio = 4.5;  // model data / device budget
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

  int64_t model_data_bytes() const {
    return num_chunks * (compute_chunk_bytes + optimizer_chunk_bytes);
  }
};

RunResult train(const pstar::config::TrainConfig& config) {
  pstar::train::TrainOptions options;
  options.device = "cpu";
  options.progress = false;
  auto built = pstar::train::build_model_and_engine(config);
  const auto* engine = dynamic_cast<const pstar::train::ChunkedEngine*>(built.engine.get());
  PSTAR_INTERNAL_ASSERT(engine != nullptr, "engine.mode \"chunked\" built no chunk engine");
  pstar::train::Trainer trainer(config, std::move(built), options);
  RunResult r;
  for (int64_t i = 0; i < config.training.steps; ++i) r.steps.push_back(trainer.step());
  r.num_chunks = engine->num_chunks();
  r.chunk_size = engine->chunk_size();
  r.compute_chunk_bytes = engine->compute_chunk_bytes();
  r.optimizer_chunk_bytes = engine->optimizer_chunk_bytes();
  r.device_budget_bytes = engine->device_budget_bytes();
  r.margin_chunks = engine->margin_chunks();
  for (int64_t bytes : engine->trace().non_model_bytes)
    r.non_model_peak_bytes = std::max(r.non_model_peak_bytes, bytes);
  return r;
}

// Figures over the steady-state steps (after the warm-up).
struct Steady {
  double h2d_per_step = 0, d2h_per_step = 0;
  int64_t h2d_min = 0, h2d_max = 0, d2h_min = 0, d2h_max = 0;
  int64_t device_peak_max = 0;     // over every step, warm-up included
  int64_t adam_device_chunks = 0;  // the last step's
};

Steady steady(const RunResult& r, int64_t warmup) {
  Steady s;
  int64_t h2d = 0, d2h = 0, n = 0;
  s.h2d_min = s.d2h_min = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const auto& m = r.steps[i];
    s.device_peak_max = std::max(s.device_peak_max, m.device_peak_bytes);
    if (static_cast<int64_t>(i) < warmup) continue;
    h2d += m.moved_h2d_bytes;
    d2h += m.moved_d2h_bytes;
    s.h2d_min = std::min(s.h2d_min, m.moved_h2d_bytes);
    s.h2d_max = std::max(s.h2d_max, m.moved_h2d_bytes);
    s.d2h_min = std::min(s.d2h_min, m.moved_d2h_bytes);
    s.d2h_max = std::max(s.d2h_max, m.moved_d2h_bytes);
    ++n;
  }
  s.h2d_per_step = static_cast<double>(h2d) / static_cast<double>(n);
  s.d2h_per_step = static_cast<double>(d2h) / static_cast<double>(n);
  s.adam_device_chunks = r.steps.back().adam_device_chunks;
  return s;
}

// Steady-state throughput over every round of one mode: tokens per step over the fastest step
// after the warm-up (on a shared machine other processes slow steps down, some by several times;
// the fastest step is the one that ran alone, as STREAM reports its best run), and over the median
// step.
struct Throughput {
  double median = 0, best = 0;
};

Throughput throughput(const std::vector<RunResult>& runs, int64_t warmup) {
  std::vector<double> seconds;
  int64_t tokens_per_step = 0;
  for (const RunResult& r : runs) {
    for (size_t i = static_cast<size_t>(warmup); i < r.steps.size(); ++i) {
      seconds.push_back(r.steps[i].step_time_s);
      tokens_per_step = r.steps[i].tokens - r.steps[i - 1].tokens;
    }
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = n % 2 == 1 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  return {static_cast<double>(tokens_per_step) / median,
          static_cast<double>(tokens_per_step) / seconds.front()};
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

int run(const Options& o) {
  pstar::core::configure_threads();
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
  config.bf16 = true;
  config.use_cpu_embedding = false;  // embeddings live in chunks and count against the budget
  // Small against the budget: the largest module (c_fc, 4h² + 4h = 1,050,624 parameters) rounded
  // up to a multiple of 64K elements, which is what the engine would raise 1 << 20 to anyway.
  config.default_chunk_size = 17 * (int64_t{1} << 16);
  config.engine.mode = "chunked";
  config.training.steps = o.steps;

  // Round 1 starts unconstrained: that run measures model data and the non-model peak the budget
  // is derived from. Later rounds alternate the order, so both modes see the same moments of a
  // shared machine; throughput is each mode's best round, and every run's losses must equal the
  // first unconstrained run's.
  std::vector<RunResult> free_runs, budgeted_runs;
  // No reallocation: free_run below refers to the first element.
  free_runs.reserve(static_cast<size_t>(o.rounds));
  budgeted_runs.reserve(static_cast<size_t>(o.rounds));
  free_runs.push_back(train(config));
  const RunResult& free_run = free_runs.front();
  const int64_t model_data = free_run.model_data_bytes();
  const int64_t budget = static_cast<int64_t>(static_cast<double>(model_data) / o.ratio);
  const int64_t floor = free_run.non_model_peak_bytes + 4 * free_run.compute_chunk_bytes;
  PSTAR_CHECK(budget >= floor, ConfigError, "a budget of model data / ", o.ratio, " = ", budget,
              " bytes is below the measured non-model peak ", free_run.non_model_peak_bytes,
              " + 4 chunks of ", free_run.compute_chunk_bytes, " bytes; lower --ratio");
  pstar::config::TrainConfig budgeted_config = config;
  budgeted_config.engine.device_memory = budget;
  budgeted_runs.push_back(train(budgeted_config));
  for (int64_t round = 1; round < o.rounds; ++round) {
    const bool budgeted_first = round % 2 == 1;
    if (budgeted_first) budgeted_runs.push_back(train(budgeted_config));
    free_runs.push_back(train(config));
    if (!budgeted_first) budgeted_runs.push_back(train(budgeted_config));
  }
  const RunResult& budgeted = budgeted_runs.front();

  auto same = [&](const RunResult& r, double pstar::train::StepMetrics::*field) {
    if (r.steps.size() != free_run.steps.size()) return false;
    for (size_t i = 0; i < r.steps.size(); ++i)
      if (!(r.steps[i].*field == free_run.steps[i].*field)) return false;
    return true;
  };
  bool losses_identical = true, grad_norms_identical = true, free_deterministic = true;
  for (const RunResult& r : budgeted_runs) {
    losses_identical = losses_identical && same(r, &pstar::train::StepMetrics::loss);
    grad_norms_identical = grad_norms_identical && same(r, &pstar::train::StepMetrics::grad_norm);
  }
  for (const RunResult& r : free_runs)
    free_deterministic = free_deterministic && same(r, &pstar::train::StepMetrics::loss);

  const Steady bs = steady(budgeted, o.warmup);
  int64_t peak = 0;
  for (const RunResult& r : budgeted_runs)
    peak = std::max(peak, steady(r, o.warmup).device_peak_max);
  const bool within_budget = peak <= budget;
  const Throughput free_tp = throughput(free_runs, o.warmup);
  const Throughput budgeted_tp = throughput(budgeted_runs, o.warmup);
  const double ratio = budgeted_tp.best / free_tp.best;

  std::printf(
      "budgeted chunk-engine training, GPT hidden 512, 8 layers, seq_len 32, batch 2, "
      "bf16, %d threads\n",
      torch::get_num_threads());
  std::printf(
      "  model data %.1f MiB (%lld chunks of %lld elements: %.2f MiB compute + %.2f MiB "
      "optimizer each); measured non-model peak %.2f MiB\n",
      mib(static_cast<double>(model_data)), static_cast<long long>(free_run.num_chunks),
      static_cast<long long>(free_run.chunk_size),
      mib(static_cast<double>(free_run.compute_chunk_bytes)),
      mib(static_cast<double>(free_run.optimizer_chunk_bytes)),
      mib(static_cast<double>(free_run.non_model_peak_bytes)));
  std::printf("  device budget %.1f MiB = model data / %.2f (unconstrained: %.1f MiB)\n",
              mib(static_cast<double>(budget)),
              static_cast<double>(model_data) / static_cast<double>(budget),
              mib(static_cast<double>(free_run.device_budget_bytes)));
  std::printf(
      "  step  loss unconstrained   loss budgeted        time s (unc/bud)  h2d MiB  d2h MiB  "
      "device peak MiB  Adam on device\n");
  for (size_t i = 0; i < budgeted.steps.size(); ++i) {
    const auto& f = free_run.steps[i];
    const auto& b = budgeted.steps[i];
    std::printf(
        "  %4lld  %-19.17g  %-19.17g  %7.3f / %-7.3f  %7.1f  %7.1f  %15.1f  %lld/%lld%s\n",
        static_cast<long long>(b.step), f.loss, b.loss, f.step_time_s, b.step_time_s,
        mib(static_cast<double>(b.moved_h2d_bytes)), mib(static_cast<double>(b.moved_d2h_bytes)),
        mib(static_cast<double>(b.device_peak_bytes)), static_cast<long long>(b.adam_device_chunks),
        static_cast<long long>(budgeted.num_chunks),
        static_cast<int64_t>(i) < o.warmup ? "  (warm-up)" : "");
  }
  std::printf(
      "  unconstrained: %8.0f tokens/s (fastest step of %zu runs; median %.0f), %lld of %lld "
      "chunks in the device margin\n",
      free_tp.best, free_runs.size(), free_tp.median,
      static_cast<long long>(free_run.margin_chunks), static_cast<long long>(free_run.num_chunks));
  std::printf(
      "  budgeted:      %8.0f tokens/s (fastest step of %zu runs; median %.0f) = %.3fx "
      "unconstrained (medians: %.3fx), %lld of %lld chunks in the device margin\n",
      budgeted_tp.best, budgeted_runs.size(), budgeted_tp.median, ratio,
      budgeted_tp.median / free_tp.median, static_cast<long long>(budgeted.margin_chunks),
      static_cast<long long>(budgeted.num_chunks));
  std::printf(
      "  moved per steady-state step: h2d %.1f MiB (%.1f..%.1f), d2h %.1f MiB "
      "(%.1f..%.1f)\n",
      mib(bs.h2d_per_step), mib(static_cast<double>(bs.h2d_min)),
      mib(static_cast<double>(bs.h2d_max)), mib(bs.d2h_per_step),
      mib(static_cast<double>(bs.d2h_min)), mib(static_cast<double>(bs.d2h_max)));
  std::printf(
      "  device peak %.1f MiB %s the budget; budgeted losses %s, gradient norms %s (all %zu "
      "budgeted runs against the first unconstrained run; the %zu unconstrained runs %s)\n",
      mib(static_cast<double>(peak)), within_budget ? "within" : "OVER",
      losses_identical ? "bit-identical" : "DIFFER",
      grad_norms_identical ? "bit-identical" : "DIFFER", budgeted_runs.size(), free_runs.size(),
      free_deterministic ? "agree" : "DISAGREE");
  std::fflush(stdout);
  if (!within_budget || !losses_identical)
    std::fprintf(stderr, "pstar-bench-budgeted: the budgeted run %s\n",
                 !within_budget ? "exceeded its device budget" : "changed the losses");

  nlohmann::json result = {
      {"bench", "budgeted"},
      {"steps", o.steps},
      {"warmup_steps", o.warmup},
      {"num_chunks", budgeted.num_chunks},
      {"chunk_size", budgeted.chunk_size},
      {"model_data_bytes", model_data},
      {"non_model_peak_bytes", free_run.non_model_peak_bytes},
      {"device_memory_bytes", budget},
      {"model_data_over_device", static_cast<double>(model_data) / static_cast<double>(budget)},
      {"rounds", o.rounds},
      {"tokens_per_s", budgeted_tp.best},
      {"unconstrained_tokens_per_s", free_tp.best},
      {"ratio_vs_unconstrained", ratio},
      {"median_tokens_per_s", budgeted_tp.median},
      {"unconstrained_median_tokens_per_s", free_tp.median},
      {"median_ratio_vs_unconstrained", budgeted_tp.median / free_tp.median},
      {"moved_h2d_bytes_per_step", bs.h2d_per_step},
      {"moved_d2h_bytes_per_step", bs.d2h_per_step},
      {"device_peak_bytes", peak},
      {"peak_within_budget", within_budget},
      {"margin_chunks", budgeted.margin_chunks},
      {"adam_device_chunks", bs.adam_device_chunks},
      {"losses_bit_identical", losses_identical},
      {"grad_norms_bit_identical", grad_norms_identical},
      {"unconstrained_runs_agree", free_deterministic}};
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
