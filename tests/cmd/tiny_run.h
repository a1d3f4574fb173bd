// The small run the cmd tests train, config and command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pstar::cmd {

// gpt-tiny (seq_len 32, micro-batch 4) in fp32 on the chunk engine with a 3 MB device tier, so that
// chunks move every step and the engine's figures are measured, on corpus.txt beside the config,
// with a constant learning rate (a run's first steps do not depend on training.steps). Tests add or
// change keys for their case.
inline nlohmann::json tiny_chunked_config(int64_t steps) {
  return {
      {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
      {"data", {{"text", "corpus.txt"}}},
      {"train_micro_batch_size_per_gpu", 4},
      {"default_chunk_size", 20000},
      {"bf16", {{"enabled", false}}},
      {"training", {{"steps", steps}, {"lr_schedule", {{"type", "constant"}}}}},
      {"engine",
       {{"mode", "chunked"},
        {"chunk_size_search", false},
        {"device_memory", "3MB"},
        {"host_memory", "1GB"}}},
  };
}

// `pstar train CONFIG --device cpu EXTRA...`'s arguments.
inline std::vector<std::string> cpu_train_args(const std::string& config,
                                               const std::vector<std::string>& extra) {
  std::vector<std::string> args{"train", config, "--device", "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace pstar::cmd
