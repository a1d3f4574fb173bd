// What the config tests share (tests/formats/config_test.cpp and tests/formats/config/*_test.cpp):
// parsing with a fixed source and base_dir, the ConfigError a config raises, message checks, and a
// config with every key set.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"

namespace pstar::config::fixtures {

// Parses with a fixed source name and an absolute base_dir, so messages and paths are predictable.
inline TrainConfig parse(const std::string& json, const std::vector<std::string>& overrides = {}) {
  return parse_train_config(json, "config.json", "/cfg", overrides);
}

// A config with the one required setting (data) plus `rest`, e.g. R"("gradient_clipping": 1)".
inline std::string with_data(const std::string& rest = "") {
  return R"({"data": {"path": "tokens.bin"})" + (rest.empty() ? "" : ", " + rest) + "}";
}

// The message of the ConfigError that parsing throws; a test failure if it does not throw one.
inline std::string config_error(const std::string& json,
                                const std::vector<std::string>& overrides = {}) {
  try {
    parse(json, overrides);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError for " << json;
  return "";
}

inline void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "expected \"" << part << "\" in the message: " << message;
  }
}

inline void expect_lacks(const std::string& message, const std::string& part) {
  EXPECT_EQ(message.find(part), std::string::npos)
      << "did not expect \"" << part << "\" in the message: " << message;
}

// Every field but `source` (which names where a config came from, not what it says).
inline void expect_same(const TrainConfig& a, const TrainConfig& b) {
  EXPECT_EQ(a.train_micro_batch_size_per_gpu, b.train_micro_batch_size_per_gpu);
  EXPECT_EQ(a.gradient_accumulation_steps, b.gradient_accumulation_steps);
  EXPECT_EQ(a.train_batch_size, b.train_batch_size);
  EXPECT_EQ(a.optimizer.type, b.optimizer.type);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.betas, b.optimizer.betas);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.fp16.enabled, b.fp16.enabled);
  EXPECT_EQ(a.fp16.loss_scale, b.fp16.loss_scale);
  EXPECT_EQ(a.fp16.initial_scale_power, b.fp16.initial_scale_power);
  EXPECT_EQ(a.fp16.loss_scale_window, b.fp16.loss_scale_window);
  EXPECT_EQ(a.fp16.hysteresis, b.fp16.hysteresis);
  EXPECT_EQ(a.fp16.min_loss_scale, b.fp16.min_loss_scale);
  EXPECT_EQ(a.bf16.enabled, b.bf16.enabled);
  EXPECT_EQ(a.gradient_clipping, b.gradient_clipping);
  EXPECT_EQ(a.default_chunk_size, b.default_chunk_size);
  EXPECT_EQ(a.use_cpu_embedding, b.use_cpu_embedding);
  EXPECT_EQ(a.release_after_init, b.release_after_init);
  EXPECT_EQ(a.model.type, b.model.type);
  EXPECT_EQ(a.model.preset, b.model.preset);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.model.layers, b.model.layers);
  EXPECT_EQ(a.model.heads, b.model.heads);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  EXPECT_EQ(a.model.init_from, b.model.init_from);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.dtype, b.data.dtype);
  EXPECT_EQ(a.data.text, b.data.text);
  EXPECT_EQ(a.data.sampling, b.data.sampling);
  EXPECT_EQ(a.data.eval.path, b.data.eval.path);
  EXPECT_EQ(a.data.eval.dtype, b.data.eval.dtype);
  EXPECT_EQ(a.data.eval.text, b.data.eval.text);
  EXPECT_EQ(a.data.eval_fraction, b.data.eval_fraction);
  EXPECT_EQ(a.training.eval_interval, b.training.eval_interval);
  EXPECT_EQ(a.training.eval_batches, b.training.eval_batches);
  EXPECT_EQ(a.training.tensorboard_dir, b.training.tensorboard_dir);
  EXPECT_EQ(a.training.steps, b.training.steps);
  EXPECT_EQ(a.training.seed, b.training.seed);
  EXPECT_EQ(a.training.log_interval, b.training.log_interval);
  EXPECT_EQ(a.training.lr_schedule.type, b.training.lr_schedule.type);
  EXPECT_EQ(a.training.lr_schedule.warmup_steps, b.training.lr_schedule.warmup_steps);
  EXPECT_EQ(a.training.lr_schedule.min_lr, b.training.lr_schedule.min_lr);
  EXPECT_EQ(a.engine.mode, b.engine.mode);
  EXPECT_EQ(a.engine.device_memory, b.engine.device_memory);
  EXPECT_EQ(a.engine.host_memory, b.engine.host_memory);
  EXPECT_EQ(a.engine.activation_checkpointing, b.engine.activation_checkpointing);
  EXPECT_EQ(a.engine.warmup_iterations, b.engine.warmup_iterations);
  EXPECT_EQ(a.engine.chunk_size_search, b.engine.chunk_size_search);
  EXPECT_EQ(a.engine.prefetch, b.engine.prefetch);
  EXPECT_EQ(a.engine.overlap_adam, b.engine.overlap_adam);
  EXPECT_EQ(a.distributed.backend, b.distributed.backend);
  EXPECT_EQ(a.distributed.share_gpus, b.distributed.share_gpus);
  EXPECT_EQ(a.distributed.numa_bind, b.distributed.numa_bind);
}

// Every key set, none to its default.
inline const char* const kFullConfig = R"({
  "_comment": "every key, none at its default",
  "train_micro_batch_size_per_gpu": 8,
  "gradient_accumulation_steps": 4,
  "train_batch_size": 32,
  "optimizer": {
    "type": "Adam",
    "params": {"lr": 0.0003, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1}
  },
  "fp16": {
    "enabled": true,
    "loss_scale": 128.0,
    "initial_scale_power": 12,
    "loss_scale_window": 500,
    "hysteresis": 3,
    "min_loss_scale": 0.5
  },
  "bf16": {"enabled": false},
  "gradient_clipping": 1.0,
  "default_chunk_size": 1048576,
  "use_cpu_embedding": false,
  "release_after_init": true,
  "model": {
    "type": "gpt",
    "preset": "tiny",
    "hidden": 256,
    "layers": 4,
    "heads": 8,
    "vocab_size": 50257,
    "seq_len": 128,
    "init_from": "weights/model.safetensors"
  },
  "data": {"text": "corpus.txt", "dtype": "uint32", "sampling": "sequential",
           "eval": {"text": "held-out.txt", "dtype": "uint32"}},
  "training": {
    "steps": 500,
    "seed": 42,
    "log_interval": 5,
    "eval_interval": 50,
    "eval_batches": 3,
    "tensorboard_dir": "runs/tiny",
    "lr_schedule": {"type": "constant", "warmup_steps": 50, "min_lr": 0.00001}
  },
  "engine": {"mode": "torch"},
  "distributed": {"backend": "gloo", "share_gpus": true}
})";

}  // namespace pstar::config::fixtures
