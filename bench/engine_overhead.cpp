// The chunk engine's overhead: the same GPT trained with engine.mode "chunked" under an unlimited
// device budget (every chunk fits in the device margin, so nothing moves after the warm-up) against
// engine.mode "torch", the reference, measured in the same run. The last line is one JSON object
// with the figures.
//
//   build/cpu-release/bench/pstar-bench-engine-overhead [--preset gpt-mini] [--batch 16]
//       [--steps 10] [--warmup 3] [--rounds 2] [--fp32]
//
// Each round builds a fresh trainer per mode, runs the warm-up steps (the chunk engine traces its
// first iteration), then times the steps. The order of the modes alternates between rounds so both
// see the same moments of a shared machine. A mode's figure is tokens per step over its fastest
// timed step of all rounds (other processes on a shared machine slow some steps down by several
// times; the fastest step is the one that ran alone, as STREAM reports its best run), with the
// median step beside it.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
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
  std::string preset = "gpt-mini";
  int64_t batch = 16;
  int64_t steps = 10;
  int64_t warmup = 3;
  int64_t rounds = 2;
  bool fp32 = false;
};

struct Run {
  std::vector<double> step_seconds;  // the timed steps
  int64_t tokens_per_step = 0;
  std::vector<double> losses;  // every step's
  // Chunk engine only (-1 otherwise), from the last timed step.
  int64_t moved_bytes = -1;
  int64_t adam_device_chunks = -1;
  int64_t num_chunks = -1;
  int64_t margin_chunks = -1;
};

Run run_mode(const pstar::config::TrainConfig& base, const std::string& mode, const Options& o) {
  // The chunk engine keeps a reference to this config: it must outlive the trainer.
  pstar::config::TrainConfig config = base;
  config.engine.mode = mode;
  config.training.steps = o.warmup + o.steps;
  pstar::train::TrainOptions options;
  options.device = "cpu";
  options.progress = false;

  auto built = pstar::train::build_model_and_engine(config);
  const auto* chunked = dynamic_cast<const pstar::train::ChunkedEngine*>(built.engine.get());
  pstar::train::Trainer trainer(config, std::move(built), options);
  pstar::train::StepMetrics m;
  Run run;
  for (int64_t i = 0; i < o.warmup; ++i) {
    m = trainer.step();
    run.losses.push_back(m.loss);
  }
  for (int64_t i = 0; i < o.steps; ++i) {
    const int64_t tokens_before = m.tokens;
    m = trainer.step();
    run.losses.push_back(m.loss);
    run.step_seconds.push_back(m.step_time_s);
    run.tokens_per_step = m.tokens - tokens_before;
  }
  if (chunked != nullptr) {
    run.moved_bytes = m.moved_h2d_bytes + m.moved_d2h_bytes;
    run.adam_device_chunks = m.adam_device_chunks;
    run.num_chunks = chunked->num_chunks();
    run.margin_chunks = chunked->margin_chunks();
  }
  return run;
}

// Tokens per step over the fastest and the median timed step of `runs`.
struct Figures {
  double best = 0, median = 0;
};

Figures figures(const std::vector<Run>& runs) {
  std::vector<double> seconds;
  for (const Run& r : runs)
    seconds.insert(seconds.end(), r.step_seconds.begin(), r.step_seconds.end());
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = n % 2 == 1 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  const auto tokens = static_cast<double>(runs.front().tokens_per_step);
  return {tokens / seconds.front(), tokens / median};
}

int run(const Options& o) {
  pstar::core::configure_threads();
  pstar::log::set_level(pstar::log::Level::kWarn);

  // Random bytes: the data does not matter for throughput.
  const TempCorpus corpus("overhead");
  pstar::config::TrainConfig config;
  config.model.preset = o.preset;
  config.model.vocab_size = 256;
  config.data.text = corpus.path.string();
  config.train_micro_batch_size_per_gpu = o.batch;
  config.bf16 = !o.fp32;
  // engine.device_memory stays unset: the chunk engine's budget is most of the machine, so every
  // chunk goes into the device margin and only the engine's own bookkeeping is measured.

  std::vector<Run> torch_runs, chunked_runs;
  for (int64_t round = 0; round < o.rounds; ++round) {
    const bool torch_first = round % 2 == 0;
    for (int i = 0; i < 2; ++i) {
      const bool is_torch = (i == 0) == torch_first;
      Run r = run_mode(config, is_torch ? "torch" : "chunked", o);
      const Figures f = figures({r});
      std::printf("  round %lld %-7s fastest step %8.0f tokens/s, median %8.0f\n",
                  static_cast<long long>(round + 1), is_torch ? "torch" : "chunked", f.best,
                  f.median);
      std::fflush(stdout);
      (is_torch ? torch_runs : chunked_runs).push_back(std::move(r));
    }
  }

  const Figures torch_f = figures(torch_runs), chunked_f = figures(chunked_runs);
  const double ratio = chunked_f.best / torch_f.best;
  const Run& chunked = chunked_runs.front();
  // Same seed, data and hyper-parameters: the engines differ only in their Adam kernels and
  // summation order, so the losses agree closely but not bit for bit.
  double loss_diff = 0;
  for (size_t i = 0; i < chunked.losses.size(); ++i)
    loss_diff = std::max(loss_diff, std::abs(chunked.losses[i] - torch_runs.front().losses[i]));
  std::printf(
      "engine overhead, %s, batch %lld, %s, %d threads, %lld warm-up + %lld timed steps per run, "
      "%lld rounds\n",
      o.preset.c_str(), static_cast<long long>(o.batch), o.fp32 ? "fp32" : "bf16",
      torch::get_num_threads(), static_cast<long long>(o.warmup), static_cast<long long>(o.steps),
      static_cast<long long>(o.rounds));
  std::printf("  torch:   %8.0f tokens/s (fastest step; median %.0f)\n", torch_f.best,
              torch_f.median);
  std::printf(
      "  chunked: %8.0f tokens/s (fastest step; median %.0f) = %.3fx torch (medians: %.3fx)\n",
      chunked_f.best, chunked_f.median, ratio, chunked_f.median / torch_f.median);
  std::printf(
      "  chunked: %lld of %lld chunks in the device margin (use_cpu_embedding keeps the "
      "embeddings' chunk on the host), %lld bytes moved in its last step; losses within %.2g of "
      "torch's\n",
      static_cast<long long>(chunked.margin_chunks), static_cast<long long>(chunked.num_chunks),
      static_cast<long long>(chunked.moved_bytes), loss_diff);
  nlohmann::json result = {{"bench", "engine_overhead"},
                           {"preset", o.preset},
                           {"batch", o.batch},
                           {"precision", o.fp32 ? "fp32" : "bf16"},
                           {"steps", o.steps},
                           {"rounds", o.rounds},
                           {"torch_tokens_per_s", torch_f.best},
                           {"chunked_tokens_per_s", chunked_f.best},
                           {"ratio_vs_torch", ratio},
                           {"torch_median_tokens_per_s", torch_f.median},
                           {"chunked_median_tokens_per_s", chunked_f.median},
                           {"median_ratio_vs_torch", chunked_f.median / torch_f.median},
                           {"chunks", chunked.num_chunks},
                           {"margin_chunks", chunked.margin_chunks},
                           {"chunked_moved_bytes_per_step", chunked.moved_bytes},
                           {"chunked_adam_device_chunks", chunked.adam_device_chunks},
                           {"max_loss_diff_vs_torch", loss_diff}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--fp32") {
      o.fp32 = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", argv[i]);
      return 2;
    }
    const std::string value = argv[++i];
    if (key == "--preset")
      o.preset = value;
    else if (key == "--batch")
      o.batch = std::stoll(value);
    else if (key == "--steps")
      o.steps = std::stoll(value);
    else if (key == "--warmup")
      o.warmup = std::stoll(value);
    else if (key == "--rounds")
      o.rounds = std::stoll(value);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i - 1]);
      return 2;
    }
  }
  if (o.steps < 1 || o.rounds < 1 || o.warmup < 1 || o.batch < 1) {
    std::fprintf(stderr, "--steps, --warmup, --rounds and --batch must be at least 1\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const pstar::Error& e) {
    std::fprintf(stderr, "pstar-bench-engine-overhead: %s error: %s\n",
                 pstar::error_kind_name(e.kind()), e.what());
    return pstar::error_exit_code(e.kind());
  }
}
