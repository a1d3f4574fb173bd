// The config's typed, range-checked reads (formats/src/config/level.cpp): wrong types, numeric
// bounds and the allowed values of each key, each error naming the path, what was expected and
// what was found.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/config/config_fixtures.h"
#include "pstar/base/error.h"
#include "pstar/formats/config.h"

namespace pstar::config {
namespace {

using namespace fixtures;  // formats/config/config_fixtures.h

// ---------------------------------------------------------------------------------------------
// Wrong types

TEST(ConfigType, StringForInteger) {
  expect_contains(
      config_error(with_data(R"("training": {"steps": "ten"})")),
      {R"(config.json: training.steps: expected a positive integer, found string "ten")"});
}

TEST(ConfigType, FractionalNumberForInteger) {
  expect_contains(
      config_error(with_data(R"("train_micro_batch_size_per_gpu": 3.5)")),
      {"train_micro_batch_size_per_gpu: expected a positive integer, found number 3.5"});
}

TEST(ConfigType, NumberForBool) {
  expect_contains(config_error(with_data(R"("fp16": {"enabled": 1})")),
                  {"fp16.enabled: expected true or false, found integer 1"});
  expect_contains(config_error(with_data(R"("release_after_init": "yes")")),
                  {R"(release_after_init: expected true or false, found string "yes")"});
  expect_contains(config_error(with_data(R"("use_cpu_embedding": "yes")")),
                  {R"(use_cpu_embedding: expected true, false or "auto", found string "yes")"});
}

TEST(ConfigType, BoolForNumber) {
  expect_contains(config_error(with_data(R"("optimizer": {"params": {"lr": true}})")),
                  {"optimizer.params.lr: expected a positive number, found boolean true"});
}

TEST(ConfigType, NullForARequiredKey) {
  expect_contains(config_error(with_data(R"("gradient_clipping": null)")),
                  {"gradient_clipping: expected a non-negative number, found null"});
}

TEST(ConfigType, ObjectExpected) {
  expect_contains(config_error(with_data(R"("optimizer": "adam")")),
                  {R"(optimizer: expected an object, found string "adam")"});
}

TEST(ConfigType, StringExpected) {
  expect_contains(config_error(with_data(R"("model": {"preset": 5})")),
                  {"model.preset: expected a string, found integer 5"});
  expect_contains(config_error(R"({"data": {"path": ["a", "b"]}})"),
                  {R"(data.path: expected a string, found array ["a","b"])"});
}

TEST(ConfigType, LongFoundValueIsTruncated) {
  const std::string long_text(500, 'x');
  const std::string message =
      config_error(with_data(R"("training": {"steps": ")" + long_text + "\"}"));
  expect_contains(message,
                  {"training.steps: expected a positive integer, found string \"xxx", "..."});
  EXPECT_LT(message.size(), 200u) << message;
}

TEST(ConfigType, BetasMustBeTwoNumbers) {
  expect_contains(config_error(with_data(R"("optimizer": {"params": {"betas": [0.9]}})")),
                  {"optimizer.params.betas: expected an array of 2 numbers, each a number in "
                   "[0, 1), found array [0.9]"});
  expect_contains(config_error(with_data(R"("optimizer": {"params": {"betas": [0.9, "x"]}})")),
                  {R"(optimizer.params.betas[1]: expected a number in [0, 1), found string "x")"});
}

// ---------------------------------------------------------------------------------------------
// Ranges and allowed values

TEST(ConfigRange, EachNumericBound) {
  struct Case {
    std::string json;
    std::string message;
  };
  const std::vector<Case> cases = {
      {with_data(R"("train_micro_batch_size_per_gpu": 0)"),
       "train_micro_batch_size_per_gpu: expected a positive integer, found 0"},
      {with_data(R"("gradient_accumulation_steps": -1)"),
       "gradient_accumulation_steps: expected a positive integer, found -1"},
      {with_data(R"("train_batch_size": 0)"), "train_batch_size: expected a positive integer"},
      {with_data(R"("optimizer": {"params": {"lr": 0}})"),
       "optimizer.params.lr: expected a positive number, found 0"},
      {with_data(R"("optimizer": {"params": {"lr": -0.001}})"),
       "optimizer.params.lr: expected a positive number, found -0.001"},
      {with_data(R"("optimizer": {"params": {"betas": [0.9, 1.0]}})"),
       "optimizer.params.betas[1]: expected a number in [0, 1), found 1.0"},
      {with_data(R"("optimizer": {"params": {"betas": [-0.1, 0.9]}})"),
       "optimizer.params.betas[0]: expected a number in [0, 1), found -0.1"},
      {with_data(R"("optimizer": {"params": {"eps": 0}})"),
       "optimizer.params.eps: expected a positive number, found 0"},
      {with_data(R"("optimizer": {"params": {"weight_decay": -0.1}})"),
       "optimizer.params.weight_decay: expected a non-negative number, found -0.1"},
      {with_data(R"("gradient_clipping": -1)"),
       "gradient_clipping: expected a non-negative number, found -1"},
      {with_data(R"("default_chunk_size": 0)"),
       "default_chunk_size: expected a positive integer, found 0"},
      {with_data(R"("fp16": {"loss_scale": -1})"),
       "fp16.loss_scale: expected a non-negative number, found -1"},
      {with_data(R"("fp16": {"initial_scale_power": 65})"),
       "fp16.initial_scale_power: expected an integer in [0, 64], found 65"},
      {with_data(R"("fp16": {"initial_scale_power": -1})"),
       "fp16.initial_scale_power: expected an integer in [0, 64], found -1"},
      {with_data(R"("fp16": {"loss_scale_window": 0})"),
       "fp16.loss_scale_window: expected a positive integer, found 0"},
      {with_data(R"("fp16": {"hysteresis": 0})"),
       "fp16.hysteresis: expected an integer in [1, 2147483647], found 0"},
      {with_data(R"("fp16": {"min_loss_scale": 0})"),
       "fp16.min_loss_scale: expected a positive number, found 0"},
      {with_data(R"("model": {"hidden": 0})"),
       "model.hidden: expected a positive integer, found 0"},
      {with_data(R"("model": {"layers": 0})"),
       "model.layers: expected a positive integer, found 0"},
      {with_data(R"("model": {"heads": -2})"),
       "model.heads: expected a positive integer, found -2"},
      {with_data(R"("model": {"vocab_size": 0})"),
       "model.vocab_size: expected a positive integer, found 0"},
      {with_data(R"("model": {"seq_len": 0})"),
       "model.seq_len: expected a positive integer, found 0"},
      {with_data(R"("training": {"steps": 0})"),
       "training.steps: expected a positive integer, found 0"},
      {with_data(R"("training": {"log_interval": 0})"),
       "training.log_interval: expected a positive integer, found 0"},
      {with_data(R"("training": {"lr_schedule": {"warmup_steps": -1}})"),
       "training.lr_schedule.warmup_steps: expected a non-negative integer, found -1"},
      {with_data(R"("training": {"lr_schedule": {"min_lr": -0.1}})"),
       "training.lr_schedule.min_lr: expected a non-negative number, found -0.1"},
      {with_data(R"("training": {"steps": 1e30})"),
       "training.steps: expected a positive integer, found 1e+30"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    expect_contains(config_error(c.json), {"config.json: " + c.message});
  }
}

TEST(ConfigRange, BoundaryValuesAreAccepted) {
  const TrainConfig c = parse(with_data(
      R"("optimizer": {"params": {"betas": [0, 0.999999], "weight_decay": 0}},
         "fp16": {"loss_scale": 0, "initial_scale_power": 64, "hysteresis": 1},
         "gradient_clipping": 0,
         "training": {"lr_schedule": {"warmup_steps": 0, "min_lr": 0.001}})"));
  EXPECT_EQ(c.fp16.initial_scale_power, 64);
  EXPECT_DOUBLE_EQ(c.training.lr_schedule.min_lr, 0.001);  // == the default lr
}

TEST(ConfigRange, ChoicesListTheValidValuesAndSuggest) {
  expect_contains(config_error(with_data(R"("optimizer": {"type": "adamw"})")),
                  {R"(optimizer.type: expected one of "Adam", "AdamW", found string "adamw")",
                   R"(did you mean "AdamW"?)"});
  expect_contains(config_error(with_data(R"("optimizer": {"type": "SGD"})")),
                  {R"(optimizer.type: expected one of "Adam", "AdamW", found string "SGD")"});
  expect_contains(config_error(R"({"data": {"path": "t.bin", "dtype": "uint8"}})"),
                  {R"(data.dtype: expected one of "uint16", "uint32", found string "uint8")",
                   R"(did you mean "uint16"?)"});
  expect_contains(
      config_error(R"({"data": {"path": "t.bin", "sampling": "shuffle"}})"),
      {R"(data.sampling: expected one of "random", "sequential", found string "shuffle")"});
  expect_contains(config_error(with_data(R"("training": {"lr_schedule": {"type": "cosin"}})")),
                  {R"(training.lr_schedule.type: expected one of "cosine", "constant")",
                   R"(did you mean "cosine"?)"});
  expect_contains(config_error(with_data(R"("model": {"type": "lama"})")),
                  {R"(model.type: expected one of "gpt", "decoder", "llama", found string "lama")",
                   R"(did you mean "llama"?)"});
  expect_contains(config_error(with_data(R"("optimizer": {"type": 3})")),
                  {R"(optimizer.type: expected one of "Adam", "AdamW", found integer 3)"});
}

TEST(ConfigRange, EngineModeAndSizes) {
  expect_contains(config_error(with_data(R"("engine": {"mode": "chunky"})")),
                  {R"(engine.mode: expected one of "chunked", "torch", found string "chunky")",
                   "did you mean \"chunked\"?"});
  auto c = parse(with_data(R"("engine": {"mode": "chunked", "device_memory": "512MiB",
                                           "host_memory": 1073741824,
                                           "activation_checkpointing": true,
                                           "warmup_iterations": 2, "chunk_size_search": true,
                                           "prefetch": false})"));
  EXPECT_EQ(c.engine.mode, EngineMode::kChunked);
  EXPECT_EQ(c.engine.device_memory, int64_t{512} << 20);
  EXPECT_EQ(c.engine.host_memory, int64_t{1} << 30);
  EXPECT_TRUE(c.engine.activation_checkpointing);
  EXPECT_EQ(c.engine.warmup_iterations, 2);
  EXPECT_TRUE(c.engine.chunk_size_search);
  EXPECT_FALSE(c.engine.prefetch);
  EXPECT_TRUE(parse(with_data()).engine.prefetch) << "prefetch is on by default";
  expect_contains(config_error(with_data(R"("engine": {"prefetch": "yes"})")),
                  {"engine.prefetch", R"(found string "yes")"});
  EXPECT_EQ(parse(with_data()).engine.overlap_adam, OnOffAuto::kAuto)
      << "overlap_adam is \"auto\" by default";
  expect_contains(config_error(with_data(R"("engine": {"device_memory": "12 parsecs"})")),
                  {"engine.device_memory: expected a size such as", R"(found "12 parsecs")"});
  expect_contains(config_error(with_data(R"("engine": {"host_memory": -5})")),
                  {"engine.host_memory"});
  expect_contains(config_error(with_data(R"("engine": {"device_memory": true})")),
                  {"engine.device_memory", "found boolean true"});
}

}  // namespace
}  // namespace pstar::config
