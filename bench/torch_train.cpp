// Throughput of the torch-mode trainer on a GPT preset: fp32 against bf16 mixed precision,
// measured in the same run. The last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-torch-train [--preset gpt-mini] [--steps 10] [--batch 16]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/train/trainer.h"

namespace {

double tokens_per_s(pstar::config::TrainConfig config, int64_t warmup, int64_t steps) {
  pstar::train::TrainOptions options;
  options.device = "cpu";
  options.progress = false;
  config.training.steps = warmup + steps;
  pstar::train::Trainer trainer(config, pstar::train::build_model(config), options);
  for (int64_t i = 0; i < warmup; ++i) trainer.step();
  double seconds = 0;
  int64_t tokens = 0;
  for (int64_t i = 0; i < steps; ++i) {
    auto m = trainer.step();
    seconds += m.step_time_s;
    tokens += static_cast<int64_t>(m.tokens_per_s * m.step_time_s + 0.5);
  }
  return static_cast<double>(tokens) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "gpt-mini";
  int64_t steps = 10, batch = 16;
  pstar::bench::parse_options(
      argc, argv, "pstar-bench-torch-train [--preset gpt-mini] [--steps 10] [--batch 16]",
      {{"--preset", [&](const std::string& v) { preset = v; }},
       {"--steps", [&](const std::string& v) { steps = std::stoll(v); }},
       {"--batch", [&](const std::string& v) { batch = std::stoll(v); }}});
  pstar::core::configure_runtime();
  pstar::log::set_level(pstar::log::Level::kWarn);

  // Random bytes: the data does not matter for throughput.
  pstar::bench::TempCorpus corpus("torch-train");
  pstar::config::TrainConfig config;
  config.model.preset = preset;
  config.model.vocab_size = 256;
  config.data.text = corpus.path.string();
  config.train_micro_batch_size_per_gpu = batch;
  config.engine.mode =
      pstar::config::EngineMode::kTorch;  // this benchmark measures the reference engine

  const double fp32 = tokens_per_s(config, 2, steps);
  config.bf16.enabled = pstar::config::OnOffAuto::kOn;
  const double bf16 = tokens_per_s(config, 2, steps);

  std::printf("torch-mode training, %s, batch %lld, %d threads\n", preset.c_str(),
              static_cast<long long>(batch), torch::get_num_threads());
  std::printf("  fp32: %10.0f tokens/s\n  bf16: %10.0f tokens/s (%.2fx fp32)\n", fp32, bf16,
              bf16 / fp32);
  nlohmann::json result = {{"bench", "torch_train"},
                           {"preset", preset},
                           {"batch", batch},
                           {"fp32_tokens_per_s", fp32},
                           {"bf16_tokens_per_s", bf16},
                           {"bf16_speedup_vs_fp32", bf16 / fp32}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
