// The chunk engine's overhead: the same GPT trained with engine.mode "chunked" under an unlimited
// device budget (every chunk fits in the device margin, so nothing moves after the warm-up) against
// engine.mode "torch", the reference, measured in the same run. The last line is one JSON object
// with the figures.
//
//   build/cpu-release/bench/pstar-bench-engine-overhead [--preset gpt-mini] [--batch 16]
//       [--steps 10] [--warmup 3] [--rounds 2] [--fp32]
//
// Each round builds both trainers (same seed, data and hyper-parameters), runs the warm-up steps
// (the chunk engine traces its first iteration) and then the timed steps, interleaved: a torch step
// and a chunked step make a pair, and which goes first alternates. The two steps of a pair see
// nearly the same moment of a shared machine, whose other processes slow some steps down by
// several times, so the headline ratio is the median over all pairs of (torch step time / chunked
// step time). Each mode's tokens/s is tokens per step over its fastest step (the one that ran
// alone, as STREAM reports its best run), with its median step beside it.
//
// Both trainers live in one process. With an unlimited budget that is harmless, but the chunk
// engine's non-model measurements (a process-wide allocation counter) then include the other
// trainer's step, so this benchmark reports none of them.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
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
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/train/run_facts.h"
#include "pstar/train/trainer.h"

namespace {

using pstar::bench::TempCorpus;

struct Options {
  std::string preset = "gpt-mini";
  int64_t batch = 16;
  int64_t steps = 10;
  int64_t warmup = 3;
  int64_t rounds = 2;
  bool fp32 = false;
};

// One engine's trainer and what its steps measured.
class Mode {
 public:
  Mode(const pstar::config::TrainConfig& base, const std::string& mode, int64_t total_steps)
      : config_(std::make_unique<pstar::config::TrainConfig>(base)) {
    // The chunk engine keeps a reference to the config it was built from: it lives on the heap
    // with the trainer.
    config_->engine.mode = pstar::config::engine_mode_from_name(mode);
    config_->training.steps = total_steps;
    pstar::train::TrainOptions options;
    options.device = "cpu";
    options.progress = false;
    auto built =
        pstar::train::build_model_and_engine(pstar::train::plan_run(*config_, "cpu", nullptr));
    chunked_ = dynamic_cast<const pstar::engine::ChunkedEngine*>(built.engine.get());
    trainer_ = std::make_unique<pstar::train::Trainer>(*config_, std::move(built), options);
  }

  // Returns the step's seconds.
  double step(bool timed) {
    const int64_t tokens_before = last_.tokens;
    last_ = trainer_->step();
    losses.push_back(last_.loss);
    if (timed) {
      tokens_per_step = last_.tokens - tokens_before;
      seconds.push_back(last_.step_time_s);
    }
    return last_.step_time_s;
  }

  const pstar::train::StepMetrics& last() const { return last_; }
  const pstar::engine::ChunkedEngine* chunked() const { return chunked_; }

  std::vector<double> seconds;  // the timed steps
  std::vector<double> losses;   // every step's
  int64_t tokens_per_step = 0;

 private:
  std::unique_ptr<pstar::config::TrainConfig> config_;
  std::unique_ptr<pstar::train::Trainer> trainer_;
  const pstar::engine::ChunkedEngine* chunked_ = nullptr;
  pstar::train::StepMetrics last_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const Options& o) {
  pstar::core::configure_runtime();
  pstar::log::set_level(pstar::log::Level::kWarn);

  // Random bytes: the data does not matter for throughput.
  const TempCorpus corpus("overhead");
  pstar::config::TrainConfig config;
  config.model.preset = o.preset;
  config.model.vocab_size = 256;
  config.data.text = corpus.path.string();
  config.train_micro_batch_size_per_gpu = o.batch;
  config.bf16.enabled = pstar::config::on_off(!o.fp32);
  // engine.device_memory stays unset: the chunk engine's budget is most of the machine, so every
  // chunk goes into the device margin and only the engine's own bookkeeping is measured.

  std::vector<double> torch_seconds, chunked_seconds, pair_ratios;
  double loss_diff = 0;
  int64_t tokens_per_step = 0, chunks = 0, margin_chunks = 0, moved_bytes = 0, adam_device = 0;
  for (int64_t round = 0; round < o.rounds; ++round) {
    Mode torch_mode(config, "torch", o.warmup + o.steps);
    Mode chunked_mode(config, "chunked", o.warmup + o.steps);
    for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
      const bool timed = i >= o.warmup;
      double torch_s = 0, chunked_s = 0;
      if ((i + round) % 2 == 0) {
        torch_s = torch_mode.step(timed);
        chunked_s = chunked_mode.step(timed);
      } else {
        chunked_s = chunked_mode.step(timed);
        torch_s = torch_mode.step(timed);
      }
      if (timed) pair_ratios.push_back(torch_s / chunked_s);
    }
    const double round_ratio =
        median(std::vector<double>(pair_ratios.end() - o.steps, pair_ratios.end()));
    std::printf(
        "  round %lld: torch fastest step %6.0f tokens/s, median %6.0f; chunked fastest %6.0f, "
        "median %6.0f; median pair ratio %.3f\n",
        static_cast<long long>(round + 1),
        static_cast<double>(torch_mode.tokens_per_step) /
            *std::min_element(torch_mode.seconds.begin(), torch_mode.seconds.end()),
        static_cast<double>(torch_mode.tokens_per_step) / median(torch_mode.seconds),
        static_cast<double>(chunked_mode.tokens_per_step) /
            *std::min_element(chunked_mode.seconds.begin(), chunked_mode.seconds.end()),
        static_cast<double>(chunked_mode.tokens_per_step) / median(chunked_mode.seconds),
        round_ratio);
    std::fflush(stdout);
    torch_seconds.insert(torch_seconds.end(), torch_mode.seconds.begin(), torch_mode.seconds.end());
    chunked_seconds.insert(chunked_seconds.end(), chunked_mode.seconds.begin(),
                           chunked_mode.seconds.end());
    // Same seed, data and hyper-parameters: the engines differ in their Adam kernels and
    // summation order, so the losses agree closely but not bit for bit.
    for (size_t i = 0; i < torch_mode.losses.size(); ++i)
      loss_diff = std::max(loss_diff, std::abs(chunked_mode.losses[i] - torch_mode.losses[i]));
    tokens_per_step = chunked_mode.tokens_per_step;
    chunks = chunked_mode.chunked()->num_chunks();
    margin_chunks = chunked_mode.chunked()->margin_chunks();
    moved_bytes =
        chunked_mode.last().engine.moved_h2d_bytes + chunked_mode.last().engine.moved_d2h_bytes;
    adam_device = chunked_mode.last().engine.adam.device_chunks;
  }

  const auto tokens = static_cast<double>(tokens_per_step);
  const double torch_best = tokens / *std::min_element(torch_seconds.begin(), torch_seconds.end());
  const double chunked_best =
      tokens / *std::min_element(chunked_seconds.begin(), chunked_seconds.end());
  const double torch_median = tokens / median(torch_seconds);
  const double chunked_median = tokens / median(chunked_seconds);
  const double ratio = median(pair_ratios);
  std::printf(
      "engine overhead, %s, batch %lld, %s, %d threads, %lld warm-up + %lld timed steps per "
      "engine and round, %lld rounds\n",
      o.preset.c_str(), static_cast<long long>(o.batch), o.fp32 ? "fp32" : "bf16",
      torch::get_num_threads(), static_cast<long long>(o.warmup), static_cast<long long>(o.steps),
      static_cast<long long>(o.rounds));
  std::printf("  torch:   %8.0f tokens/s (fastest step; median %.0f)\n", torch_best, torch_median);
  std::printf("  chunked: %8.0f tokens/s (fastest step; median %.0f)\n", chunked_best,
              chunked_median);
  std::printf(
      "  chunked / torch: %.3f (median of %zu interleaved step pairs; fastest steps %.3f, "
      "median steps %.3f)\n",
      ratio, pair_ratios.size(), chunked_best / torch_best, chunked_median / torch_median);
  std::printf(
      "  chunked: %lld of %lld chunks in the device margin (use_cpu_embedding keeps the "
      "embeddings' chunks on the host), Adam on the device for %lld, %lld bytes moved in its "
      "last step; losses within %.2g of torch's\n",
      static_cast<long long>(margin_chunks), static_cast<long long>(chunks),
      static_cast<long long>(adam_device), static_cast<long long>(moved_bytes), loss_diff);
  nlohmann::json result = {{"bench", "engine_overhead"},
                           {"preset", o.preset},
                           {"batch", o.batch},
                           {"precision", o.fp32 ? "fp32" : "bf16"},
                           {"steps", o.steps},
                           {"rounds", o.rounds},
                           {"torch_tokens_per_s", torch_best},
                           {"chunked_tokens_per_s", chunked_best},
                           {"ratio_vs_torch", ratio},
                           {"fastest_step_ratio_vs_torch", chunked_best / torch_best},
                           {"torch_median_tokens_per_s", torch_median},
                           {"chunked_median_tokens_per_s", chunked_median},
                           {"median_step_ratio_vs_torch", chunked_median / torch_median},
                           {"chunks", chunks},
                           {"margin_chunks", margin_chunks},
                           {"chunked_adam_device_chunks", adam_device},
                           {"chunked_moved_bytes_per_step", moved_bytes},
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
    try {
      if (key == "--preset") {
        o.preset = value;
      } else if (key == "--batch") {
        o.batch = std::stoll(value);
      } else if (key == "--steps") {
        o.steps = std::stoll(value);
      } else if (key == "--warmup") {
        o.warmup = std::stoll(value);
      } else if (key == "--rounds") {
        o.rounds = std::stoll(value);
      } else {
        std::fprintf(stderr, "unknown option %s\n", key.c_str());
        return 2;
      }
    } catch (const std::logic_error&) {  // std::stoll: not a number
      std::fprintf(stderr, "option %s: '%s' is not a number\n", key.c_str(), value.c_str());
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
    std::fprintf(stderr, "pstar-bench-engine-overhead: %s: %s\n", pstar::error_kind_name(e.kind()),
                 e.what());
    return pstar::error_exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pstar-bench-engine-overhead: %s\n", e.what());
    return 1;
  }
}
