// Tests for the `pstar train` config: defaults, every key, every error class (checked by message
// substrings: the path, what was expected, what was found, the suggestion), --set overrides, path
// resolution, file loading and the to_json_text round trip.
#include "pstar/formats/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::config {
namespace {

namespace fs = std::filesystem;

// Parses with a fixed source name and an absolute base_dir, so messages and paths are predictable.
TrainConfig parse(const std::string& json, const std::vector<std::string>& overrides = {}) {
  return parse_train_config(json, "config.json", "/cfg", overrides);
}

// A config with the one required setting (data) plus `rest`, e.g. R"("gradient_clipping": 1)".
std::string with_data(const std::string& rest = "") {
  return R"({"data": {"path": "tokens.bin"})" + (rest.empty() ? "" : ", " + rest) + "}";
}

// The message of the ConfigError that parsing throws; a test failure if it does not throw one.
std::string config_error(const std::string& json, const std::vector<std::string>& overrides = {}) {
  try {
    parse(json, overrides);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError for " << json;
  return "";
}

void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "expected \"" << part << "\" in the message: " << message;
  }
}

void expect_lacks(const std::string& message, const std::string& part) {
  EXPECT_EQ(message.find(part), std::string::npos)
      << "did not expect \"" << part << "\" in the message: " << message;
}

// Every field but `source` (which names where a config came from, not what it says).
void expect_same(const TrainConfig& a, const TrainConfig& b) {
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
}

// Every key set, none to its default.
const char* const kFullConfig = R"({
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
    "lr_schedule": {"type": "constant", "warmup_steps": 50, "min_lr": 0.00001}
  },
  "engine": {"mode": "torch"},
  "distributed": {"backend": "gloo", "share_gpus": true}
})";

// ---------------------------------------------------------------------------------------------
// Reading

TEST(ConfigParse, MinimalConfigGetsTheStructDefaults) {
  const TrainConfig c = parse(with_data());
  TrainConfig expected;
  expected.data.path = "/cfg/tokens.bin";
  expect_same(c, expected);
  EXPECT_EQ(c.source, "config.json");
}

TEST(ConfigParse, FullConfigReadsEveryKey) {
  const TrainConfig c = parse(kFullConfig);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.train_batch_size, 32);
  EXPECT_EQ(c.optimizer.type, "Adam");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.0003);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_DOUBLE_EQ(c.fp16.loss_scale, 128.0);
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_DOUBLE_EQ(c.fp16.min_loss_scale, 0.5);
  EXPECT_EQ(c.bf16.enabled, OnOffAuto::kOff);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.default_chunk_size, 1048576);
  EXPECT_EQ(c.use_cpu_embedding, OnOffAuto::kOff);
  EXPECT_TRUE(c.release_after_init);
  EXPECT_EQ(c.model.type, "gpt");
  EXPECT_EQ(c.model.preset, "tiny");
  EXPECT_EQ(c.model.hidden, 256);
  EXPECT_EQ(c.model.layers, 4);
  EXPECT_EQ(c.model.heads, 8);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.seq_len, 128);
  EXPECT_EQ(c.model.init_from, "/cfg/weights/model.safetensors");
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.data.text, "/cfg/corpus.txt");
  EXPECT_EQ(c.data.dtype, "uint32");
  EXPECT_EQ(c.data.sampling, "sequential");
  EXPECT_EQ(c.data.eval.text, "/cfg/held-out.txt");
  EXPECT_EQ(c.data.eval.dtype, "uint32");
  EXPECT_FALSE(c.data.eval_fraction.has_value());
  EXPECT_EQ(c.training.eval_interval, 50);
  EXPECT_EQ(c.training.eval_batches, 3);
  EXPECT_EQ(c.training.steps, 500);
  EXPECT_EQ(c.training.seed, 42u);
  EXPECT_EQ(c.training.log_interval, 5);
  EXPECT_EQ(c.training.lr_schedule.type, "constant");
  EXPECT_EQ(c.training.lr_schedule.warmup_steps, 50);
  EXPECT_DOUBLE_EQ(c.training.lr_schedule.min_lr, 0.00001);
  EXPECT_EQ(c.engine.mode, EngineMode::kTorch);
  EXPECT_EQ(c.distributed.backend, DistBackend::kGloo);
  EXPECT_TRUE(c.distributed.share_gpus);
}

TEST(ConfigParse, CommentKeysAreIgnoredAtEveryLevel) {
  const TrainConfig c = parse(R"({
    "_comment": "top",
    "// note": 1,
    "_comment_lr": {"anything": [1, 2]},
    "optimizer": {"_comment": "o", "params": {"//": "p", "lr": 0.5}},
    "training": {"lr_schedule": {"_comment": null}},
    "data": {"path": "tokens.bin", "_comment": "d"}
  })");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.5);
}

TEST(ConfigParse, NullLeavesOptionalKeysUnset) {
  const TrainConfig c = parse(with_data(R"("train_batch_size": null, "model": {"hidden": null})"));
  EXPECT_FALSE(c.train_batch_size.has_value());
  EXPECT_FALSE(c.model.hidden.has_value());
}

TEST(ConfigParse, IntegralFloatIsAcceptedAsInteger) {
  const TrainConfig c = parse(with_data(R"("training": {"steps": 4.0, "log_interval": 1e3})"));
  EXPECT_EQ(c.training.steps, 4);
  EXPECT_EQ(c.training.log_interval, 1000);
}

TEST(ConfigParse, SeedTakesTheFullUint64Range) {
  const TrainConfig c = parse(with_data(R"("training": {"seed": 18446744073709551615})"));
  EXPECT_EQ(c.training.seed, 18446744073709551615ull);
  expect_contains(config_error(with_data(R"("training": {"seed": -1})")),
                  {"training.seed: expected a non-negative integer, found -1"});
}

TEST(ConfigParse, TopLevelMustBeAnObject) {
  expect_contains(config_error("[1, 2]"),
                  {"config.json: expected a JSON object at the top level, found array [1,2]"});
}

// ---------------------------------------------------------------------------------------------
// Unknown keys

TEST(ConfigUnknownKey, NamesFullPathAndClosestKey) {
  const std::string message = config_error(with_data(R"("optimizer": {"params": {"lrr": 0.1}})"));
  expect_contains(message, {"config.json: ", "unknown key 'optimizer.params.lrr'",
                            "did you mean 'optimizer.params.lr'?"});
}

TEST(ConfigUnknownKey, TopLevelTypo) {
  expect_contains(
      config_error(with_data(R"("gradient_acumulation_steps": 2)")),
      {"unknown key 'gradient_acumulation_steps'", "did you mean 'gradient_accumulation_steps'?"});
}

TEST(ConfigUnknownKey, TypoIgnoresCase) {
  expect_contains(config_error(with_data(R"("Engine": {"mode": "torch"})")),
                  {"unknown key 'Engine'", "did you mean 'engine'?"});
}

TEST(ConfigUnknownKey, ListsTheKnownKeysWhenNothingIsClose) {
  const std::string message =
      config_error(with_data(R"("optimizer": {"params": {"momentum": 0.9}})"));
  expect_contains(message, {"unknown key 'optimizer.params.momentum'",
                            "the keys allowed in 'optimizer.params' are: lr, betas, eps, "
                            "weight_decay"});
  expect_lacks(message, "did you mean");
  expect_contains(config_error(with_data(R"("zzzzzzzz": 1)")),
                  {"unknown key 'zzzzzzzz'",
                   "the top-level keys are: "
                   "train_micro_batch_size_per_gpu, "});
}

TEST(ConfigUnknownKey, PointsToTheKeyAtAnotherLevel) {
  expect_contains(config_error(with_data(R"("lr": 0.1)")),
                  {"unknown key 'lr'", "did you mean 'optimizer.params.lr'?"});
  expect_contains(config_error(with_data(R"("enabled": true)")),
                  {"unknown key 'enabled'", "did you mean 'fp16.enabled' or 'bf16.enabled'?"});
}

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
                  {R"(model.type: expected one of "gpt", "llama", found string "lama")",
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

// distributed.backend and distributed.share_gpus (Note [rank device]): the defaults, every value
// from the file and from --set, written back as given; whether a backend suits the device and the
// build is the run plan's to say (plan::choose_rank_device).
TEST(ConfigParse, DistributedKeys) {
  const TrainConfig defaults = parse(with_data());
  EXPECT_EQ(defaults.distributed.backend, DistBackend::kAuto) << "backend is \"auto\" by default";
  EXPECT_FALSE(defaults.distributed.share_gpus) << "GPUs are not shared by default";
  const std::pair<const char*, DistBackend> backends[] = {
      {"auto", DistBackend::kAuto}, {"nccl", DistBackend::kNccl}, {"gloo", DistBackend::kGloo}};
  for (const auto& [name, backend] : backends) {
    SCOPED_TRACE(name);
    const TrainConfig c =
        parse(with_data(str_cat(R"("distributed": {"backend": ")", name, R"("})")));
    EXPECT_EQ(c.distributed.backend, backend);
    EXPECT_STREQ(dist_backend_name(backend), name);
    EXPECT_EQ(dist_backend_from_name(name), backend);
    EXPECT_EQ(parse(with_data(), {str_cat("distributed.backend=", name)}).distributed.backend,
              backend);
    const std::string text = to_json_text(c);
    expect_contains(text, {str_cat(R"("backend": ")", name, R"(")")});
    expect_same(parse(text), c);
  }
  EXPECT_TRUE(parse(with_data(R"("distributed": {"share_gpus": true})")).distributed.share_gpus);
  EXPECT_TRUE(parse(with_data(), {"distributed.share_gpus=true"}).distributed.share_gpus);
  expect_contains(to_json_text(parse(with_data(), {"distributed.share_gpus=true"})),
                  {R"("share_gpus": true)"});
}

// Every config error of the distributed keys names the key and the value found, and says what
// works.
TEST(ConfigParse, DistributedKeysRefuseNamingKeyAndValue) {
  expect_contains(
      config_error(with_data(R"("distributed": {"backend": "NCCL"})")),
      {R"(distributed.backend: expected one of "auto", "nccl", "gloo", found string "NCCL")",
       R"("auto" follows the compute device: nccl on a GPU, gloo on the CPU)",
       R"(did you mean "nccl"?)"});
  expect_contains(
      config_error(with_data(), {"distributed.backend=mpi"}),
      {R"(distributed.backend: expected one of "auto", "nccl", "gloo", found string "mpi")",
       "(from --set 'distributed.backend=mpi')"});
  expect_contains(config_error(with_data(R"("distributed": {"backend": true})")),
                  {"distributed.backend: expected one of", "found boolean true"});
  expect_contains(config_error(with_data(R"("distributed": {"share_gpus": "yes"})")),
                  {R"(distributed.share_gpus: expected true or false, found string "yes")"});
  expect_contains(config_error(with_data(R"("distributed": {"share_gpus": 1})")),
                  {"distributed.share_gpus: expected true or false, found integer 1"});
  expect_contains(
      config_error(with_data(R"("distributed": {"share_gpu": true})")),
      {"unknown key 'distributed.share_gpu'", "did you mean 'distributed.share_gpus'?"});
  expect_contains(config_error(with_data(R"("distributed": "nccl")")),
                  {R"(distributed: expected an object, found string "nccl")"});
  try {
    dist_backend_from_name("mpi");
    ADD_FAILURE() << "dist_backend_from_name accepted \"mpi\"";
  } catch (const ConfigError& e) {
    expect_contains(
        e.what(), {R"(distributed.backend: expected one of "auto", "nccl", "gloo", found "mpi")"});
  }
}

TEST(SizeTest, ParsesUnitsAndRejectsNonsense) {
  EXPECT_EQ(parse_size_bytes("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_size_bytes("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(parse_size_bytes("1.5GB"), int64_t{1500000000});
  EXPECT_EQ(parse_size_bytes("2 kib"), 2048);
  EXPECT_EQ(parse_size_bytes("4096"), 4096);
  EXPECT_EQ(parse_size_bytes("16g"), int64_t{16} << 30);
  EXPECT_FALSE(parse_size_bytes("").has_value());
  EXPECT_FALSE(parse_size_bytes("0MiB").has_value());
  EXPECT_FALSE(parse_size_bytes("-1GiB").has_value());
  EXPECT_FALSE(parse_size_bytes("5 parsecs").has_value());
  EXPECT_FALSE(parse_size_bytes("GiB").has_value());
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
}

// ---------------------------------------------------------------------------------------------
// Checks across keys

// train_batch_size counts every rank's sequences, and a config does not know the world size: the
// run plan checks it (RunPlan.TrainBatchSizeCountsEveryRank). Reading keeps it as given.
TEST(ConfigCross, TrainBatchSizeIsKeptForTheRunPlan) {
  const TrainConfig c = parse(with_data(R"("train_micro_batch_size_per_gpu": 4,
                                           "gradient_accumulation_steps": 2,
                                           "train_batch_size": 16)"));
  EXPECT_EQ(c.train_batch_size, 16);
}

TEST(ConfigCross, Fp16AndBf16AreExclusive) {
  expect_contains(
      config_error(with_data(R"("fp16": {"enabled": true}, "bf16": {"enabled": true})")),
      {"fp16.enabled and bf16.enabled are both true"});
  EXPECT_EQ(parse(with_data(R"("bf16": {"enabled": true})")).bf16.enabled, OnOffAuto::kOn);
  expect_contains(
      config_error(with_data(R"("fp16": {"enabled": true}, "bf16": {"enabled": "auto"})")),
      {R"(fp16.enabled is true and bf16.enabled is "auto")"});
  EXPECT_TRUE(
      parse(with_data(R"("fp16": {"enabled": true}, "bf16": {"enabled": false})")).fp16.enabled);
}

// The settings that take true, false or "auto" (OnOffAuto): each value parses to its own state,
// from the file and from --set, the config keeps "auto" for the run plan to decide, and it writes
// each back as it was given.
TEST(ConfigOnOffAuto, EveryKeyParsesTrueFalseAndAuto) {
  struct Key {
    const char* dotted;  // as --set and messages spell it
    const char* object;  // the JSON around the value
    const char* field;
    OnOffAuto (*get)(const TrainConfig&);
  };
  const Key keys[] = {
      {"bf16.enabled", "bf16", "enabled", [](const TrainConfig& c) { return c.bf16.enabled; }},
      {"engine.overlap_adam", "engine", "overlap_adam",
       [](const TrainConfig& c) { return c.engine.overlap_adam; }},
  };
  const std::pair<const char*, OnOffAuto> values[] = {
      {"true", OnOffAuto::kOn}, {"false", OnOffAuto::kOff}, {R"("auto")", OnOffAuto::kAuto}};
  for (const Key& key : keys) {
    SCOPED_TRACE(key.dotted);
    for (const auto& [json, state] : values) {
      SCOPED_TRACE(json);
      const TrainConfig c =
          parse(with_data(str_cat(R"(")", key.object, R"(": {")", key.field, R"(": )", json, "}")));
      EXPECT_EQ(key.get(c), state);
      EXPECT_STREQ(on_off_auto_name(state), json) << "the message spelling is the JSON one";
      // --set takes the same words (auto unquoted, as a shell would pass it).
      const std::string word = state == OnOffAuto::kAuto ? "auto" : json;
      EXPECT_EQ(key.get(parse(with_data(), {str_cat(key.dotted, "=", word)})), state);
      // Written back as given, and read back to the same state.
      const std::string text = to_json_text(c);
      EXPECT_NE(text.find(str_cat(R"(")", key.field, R"(": )", json)), std::string::npos) << text;
      expect_same(parse(text), c);
    }
  }
}

// Anything but true, false or "auto" is a ConfigError that names the key and the value found and
// says what works.
TEST(ConfigOnOffAuto, AnythingElseIsRefusedNamingKeyAndValue) {
  const std::pair<const char*, const char*> bad[] = {
      {R"("yes")", R"(found string "yes")"}, {R"("Auto")", R"(found string "Auto")"},
      {R"("on")", R"(found string "on")"},   {"1", "found integer 1"},
      {"0.5", "found number 0.5"},           {"null", "found null"},
      {"[true]", "found array [true]"},      {R"({"auto": true})", "found object"},
  };
  for (const char* key : {"bf16.enabled", "engine.overlap_adam"}) {
    const std::string object = std::string(key).substr(0, std::string(key).find('.'));
    const std::string field = std::string(key).substr(object.size() + 1);
    for (const auto& [json, found] : bad) {
      SCOPED_TRACE(str_cat(key, " = ", json));
      expect_contains(
          config_error(with_data(str_cat(R"(")", object, R"(": {")", field, R"(": )", json, "}"))),
          {str_cat(key, R"(: expected true, false or "auto", )", found)});
    }
    expect_contains(
        config_error(with_data(), {str_cat(key, "=sometimes")}),
        {str_cat(key, R"(: expected true, false or "auto", found string "sometimes")")});
  }
}

TEST(ConfigCross, HiddenMustBeAMultipleOfHeads) {
  expect_contains(config_error(with_data(R"("model": {"hidden": 770, "heads": 12})")),
                  {"model.hidden: expected a multiple of model.heads (12), found 770"});
  // With only one of them given, the preset supplies the other and the engine checks.
  EXPECT_EQ(parse(with_data(R"("model": {"hidden": 770})")).model.hidden, 770);
}

TEST(ConfigCross, ExactlyOneDataSource) {
  expect_contains(config_error(R"({"data": {"path": "a.bin", "text": "a.txt"}})"),
                  {"config.json: data.path and data.text are both set; set exactly one"});
  expect_contains(config_error("{}"),
                  {"config.json: no training data: set data.path", ", data.text", "or data.jsonl"});
  expect_contains(config_error(R"({"data": {"path": ""}})"), {"no training data"});
  expect_contains(config_error(R"({"data": {"path": "a.bin", "tokenizer": "tok.json"}})"),
                  {"data.tokenizer is set without data.text"});
}

TEST(ConfigCross, HeldOutData) {
  TrainConfig c = parse(with_data(R"("data": {"path": "t.bin", "eval_fraction": 0.05})"));
  ASSERT_TRUE(c.data.eval_fraction.has_value());
  EXPECT_DOUBLE_EQ(*c.data.eval_fraction, 0.05);
  EXPECT_TRUE(c.data.has_eval());
  EXPECT_EQ(c.training.eval_interval, 0);  // default: only after the last step
  EXPECT_EQ(c.training.eval_batches, 8);
  c = parse(R"({"data": {"path": "t.bin", "eval": {"path": "e.bin", "dtype": "uint32"}},
                "training": {"eval_interval": 10}})");
  EXPECT_EQ(c.data.eval.path, "/cfg/e.bin");
  EXPECT_EQ(c.data.eval.dtype, "uint32");
  EXPECT_EQ(c.training.eval_interval, 10);
  EXPECT_FALSE(parse(with_data()).data.has_eval());
  // null unsets; --set reaches the new keys.
  EXPECT_FALSE(parse(R"({"data": {"path": "t.bin", "eval_fraction": null}})").data.has_eval());
  c = parse(with_data(), {"data.eval_fraction=0.25", "training.eval_batches=2"});
  EXPECT_DOUBLE_EQ(*c.data.eval_fraction, 0.25);
  EXPECT_EQ(c.training.eval_batches, 2);

  for (const char* bad : {"0", "1", "1.5", "-0.1"}) {
    expect_contains(
        config_error(str_cat(R"({"data": {"path": "t.bin", "eval_fraction": )", bad, "}}")),
        {"data.eval_fraction: expected a number in (0, 1)", str_cat("found ", bad),
         "the share of the training source held out"});
  }
  expect_contains(config_error(R"({"data": {"path": "t.bin", "eval_fraction": "x"}})"),
                  {"data.eval_fraction: expected a number", "string \"x\""});
  expect_contains(
      config_error(
          R"({"data": {"path": "t.bin", "eval_fraction": 0.1, "eval": {"path": "e.bin"}}})"),
      {"data.eval and data.eval_fraction (0.1) are both set"});
  expect_contains(
      config_error(R"({"data": {"text": "t.txt", "eval": {"path": "e.bin", "text": "e.txt"}}})"),
      {"data.eval.path and data.eval.text are both set"});
  expect_contains(config_error(R"({"data": {"path": "t.bin", "eval": {"text": "e.txt"}}})"),
                  {"data.eval.text (e.txt) needs training text in data.text", "data.eval.path"});
  expect_contains(
      config_error(with_data(R"("training": {"eval_interval": 5})")),
      {"training.eval_interval is 5 but there is no held-out data", "data.eval_fraction"});
  expect_contains(config_error(with_data(R"("training": {"eval_batches": 0})")),
                  {"training.eval_batches: expected a positive integer, found 0"});
  expect_contains(config_error(with_data(R"("training": {"eval_interval": -1})")),
                  {"training.eval_interval: expected a non-negative integer, found -1"});
  expect_contains(config_error(R"({"data": {"path": "t.bin", "eval": {"pth": "e.bin"}}})"),
                  {"data.eval.pth"});
}

TEST(ConfigCross, MinLrMustNotExceedLr) {
  expect_contains(
      config_error(with_data(R"("optimizer": {"params": {"lr": 0.001}},
                                "training": {"lr_schedule": {"min_lr": 0.01}})")),
      {"training.lr_schedule.min_lr: expected a number in [0, optimizer.params.lr = 0.001], "
       "found 0.01"});
}

// ---------------------------------------------------------------------------------------------
// --set overrides

TEST(ConfigOverride, ValueIsJsonWhenItParsesElseAString) {
  const TrainConfig c = parse(
      with_data(), {"training.steps=50", "model.preset=gpt2-small", "optimizer.params.lr=3e-4",
                    "bf16.enabled=true", "optimizer.params.betas=[0.8, 0.9]",
                    "train_batch_size=null", R"(model.init_from="123")"});
  EXPECT_EQ(c.training.steps, 50);
  EXPECT_EQ(c.model.preset, "gpt2-small");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.bf16.enabled, OnOffAuto::kOn);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.9);
  EXPECT_FALSE(c.train_batch_size.has_value());
  EXPECT_EQ(fs::path(c.model.init_from).filename(), "123");
}

TEST(ConfigOverride, ReplacesFileValuesAndLaterOverridesWin) {
  const TrainConfig c = parse(with_data(R"("training": {"steps": 10, "seed": 7})"),
                              {"training.steps=20", "training.steps=30"});
  EXPECT_EQ(c.training.steps, 30);
  EXPECT_EQ(c.training.seed, 7u);  // siblings in the file are kept
}

TEST(ConfigOverride, CreatesMissingObjects) {
  const TrainConfig c =
      parse(with_data(), {"optimizer.params.weight_decay=0", "training.lr_schedule.type=constant"});
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.training.lr_schedule.type, "constant");
}

TEST(ConfigOverride, BadFormSaysKeyEqualsValue) {
  for (const std::string bad :
       {"training.steps", "=5", "training..steps=5", ".steps=5", "steps.=1"}) {
    SCOPED_TRACE(bad);
    expect_contains(config_error(with_data(), {bad}), {"--set '" + bad + "'", "KEY=VALUE"});
  }
}

TEST(ConfigOverride, SettingIntoANonObjectNamesTheOverride) {
  expect_contains(config_error(with_data(R"("training": {"steps": 10})"), {"training.steps.x=1"}),
                  {"--set 'training.steps.x=1'", "cannot set 'training.steps.x'",
                   "'training.steps' is not an object (it is integer 10)"});
}

TEST(ConfigOverride, UnknownKeySaysItCameFromSet) {
  expect_contains(config_error(with_data(), {"optimizer.params.lrr=0.1"}),
                  {"unknown key 'optimizer.params.lrr'", "did you mean 'optimizer.params.lr'?",
                   "from --set 'optimizer.params.lrr=0.1'"});
  expect_contains(config_error(with_data(), {"optimzer.params.lr=0.1"}),
                  {"unknown key 'optimzer'", "did you mean 'optimizer'?",
                   "from --set 'optimzer.params.lr=0.1'"});
}

TEST(ConfigOverride, WrongTypeSaysItCameFromSet) {
  expect_contains(config_error(with_data(), {"training.steps=ten"}),
                  {R"(training.steps: expected a positive integer, found string "ten")",
                   "from --set 'training.steps=ten'"});
  // A value that parses as a JSON number where a string belongs: say how to quote it.
  expect_contains(
      config_error(with_data(), {"model.preset=125"}),
      {"model.preset: expected a string, found integer 125", R"(--set 'model.preset="125"')"});
}

TEST(ConfigOverride, FileErrorsDoNotMentionSet) {
  const std::string message =
      config_error(with_data(R"("training": {"steps": 0})"), {"training.seed=1"});
  expect_contains(message, {"training.steps: expected a positive integer, found 0"});
  expect_lacks(message, "--set");
}

// ---------------------------------------------------------------------------------------------
// Path resolution

TEST(ConfigPaths, RelativePathsInTheFileResolveAgainstBaseDir) {
  const TrainConfig c = parse(R"({"model": {"init_from": "../w/model.safetensors"},
                                  "data": {"path": "./sub/tokens.bin"}})");
  EXPECT_EQ(c.model.init_from, "/w/model.safetensors");
  EXPECT_EQ(c.data.path, "/cfg/sub/tokens.bin");
}

TEST(ConfigPaths, AbsolutePathsAreKept) {
  const TrainConfig c = parse(R"({"data": {"text": "/corpora/shakespeare.txt"}})");
  EXPECT_EQ(c.data.text, "/corpora/shakespeare.txt");
}

TEST(ConfigPaths, EmptyPathsStayEmpty) {
  const TrainConfig c = parse(with_data());
  EXPECT_EQ(c.model.init_from, "");
  EXPECT_EQ(c.data.text, "");
}

TEST(ConfigPaths, RelativePathsFromOverridesResolveAgainstTheWorkingDirectory) {
  const fs::path cwd = fs::current_path();
  const TrainConfig c = parse(R"({"data": {"path": "file.bin"}, "model": {"init_from": "m.st"}})",
                              {"data.path=tokens.bin", "model.init_from=w/m.safetensors"});
  EXPECT_EQ(c.data.path, (cwd / "tokens.bin").string());
  EXPECT_EQ(c.model.init_from, (cwd / "w/m.safetensors").string());

  // Setting a parent object counts as setting the path inside it.
  const TrainConfig d = parse(R"({"data": {"path": "file.bin"}})", {R"(data={"text": "a.txt"})"});
  EXPECT_EQ(d.data.text, (cwd / "a.txt").string());
  EXPECT_EQ(d.data.path, "");  // the override replaced the whole object

  // An override of a sibling key leaves the file's path relative to the file.
  EXPECT_EQ(parse(with_data(), {"data.dtype=uint32"}).data.path, "/cfg/tokens.bin");
}

// ---------------------------------------------------------------------------------------------
// Files

class ConfigFile : public ::testing::Test {
 protected:
  fs::path write(const std::string& name, const std::string& text) {
    pstar::testing::write_text(dir_.file(name), text);
    return dir_.path() / name;
  }
  pstar::testing::ScratchDir dir_;
};

TEST_F(ConfigFile, LoadsAndResolvesAgainstTheFileDirectory) {
  const fs::path path = write("train.json", R"({"data": {"path": "tokens.bin"},
                                                "training": {"steps": 7}})");
  const TrainConfig c = load_train_config(path.string(), {"training.log_interval=2"});
  EXPECT_EQ(c.source, path.string());
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_EQ(c.training.log_interval, 2);
  EXPECT_EQ(c.data.path, (dir_.path() / "tokens.bin").string());
}

TEST_F(ConfigFile, MissingFileIsAnIoErrorNamingThePath) {
  const std::string path = dir_.file("missing.json");
  try {
    load_train_config(path);
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    expect_contains(e.what(), {"cannot open config file '" + path + "'", "No such file"});
  }
}

TEST_F(ConfigFile, DirectoryIsAnIoError) {
  try {
    load_train_config(dir_.path().string());
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    expect_contains(e.what(), {dir_.path().string(), "is a directory"});
  }
}

TEST_F(ConfigFile, SyntaxErrorNamesTheFileAndLine) {
  const fs::path path = write("bad.json", "{\n  \"training\": {\n    \"steps\": 10,\n  }\n}\n");
  try {
    load_train_config(path.string());
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {path.string() + ": invalid JSON: ", "line 4, column 3", "(byte "});
    expect_lacks(e.what(), "json.exception");
  }
}

TEST(ConfigJson, EmptyTextAndHugeNumbersAreConfigErrors) {
  expect_contains(config_error(""), {"config.json: invalid JSON: ", "line 1"});
  expect_contains(config_error(R"({"gradient_clipping": 1e999})"),
                  {"config.json: invalid JSON: ", "1e999"});
}

TEST(ConfigDocs, EveryJsonExampleInConfigMdParses) {
  const std::string doc =
      pstar::testing::read_text(std::string(PSTAR_SOURCE_DIR) + "/docs/config.md");
  ASSERT_FALSE(doc.empty()) << "cannot read docs/config.md";
  int examples = 0;
  for (size_t start = doc.find("```json\n"); start != std::string::npos;
       start = doc.find("```json\n", start)) {
    start += 8;
    const size_t end = doc.find("```", start);
    ASSERT_NE(end, std::string::npos);
    const std::string json = doc.substr(start, end - start);
    SCOPED_TRACE(json);
    EXPECT_NO_THROW(parse(json));
    ++examples;
    start = end + 3;
  }
  EXPECT_GE(examples, 2);  // the minimal and the full example
}

// ---------------------------------------------------------------------------------------------
// to_json_text

TEST(ConfigRoundTrip, FullConfig) {
  const TrainConfig c = parse(kFullConfig);
  const std::string text = to_json_text(c);
  const TrainConfig back = parse_train_config(text, "resolved.json", "/elsewhere");
  expect_same(back, c);
  EXPECT_EQ(to_json_text(back), text);
}

TEST(ConfigRoundTrip, DefaultsAndExtremes) {
  for (const std::string& json :
       {with_data(), with_data(R"("training": {"seed": 18446744073709551615},
                                  "optimizer": {"params": {"lr": 0.1, "eps": 1e-300}},
                                  "model": {"hidden": 9223372036854775807})")}) {
    SCOPED_TRACE(json);
    const TrainConfig c = parse(json);
    expect_same(parse_train_config(to_json_text(c), "resolved.json", "/elsewhere"), c);
  }
}

TEST(ConfigRoundTrip, TextHasEveryKeyIndentedByTwoSpaces) {
  const std::string text = to_json_text(parse(with_data()));
  EXPECT_EQ(text.rfind("{\n  \"train_micro_batch_size_per_gpu\": 4,\n", 0), 0u) << text;
  for (const char* key : {"train_micro_batch_size_per_gpu",
                          "gradient_accumulation_steps",
                          "train_batch_size",
                          "optimizer",
                          "type",
                          "params",
                          "lr",
                          "betas",
                          "eps",
                          "weight_decay",
                          "fp16",
                          "enabled",
                          "loss_scale",
                          "initial_scale_power",
                          "loss_scale_window",
                          "hysteresis",
                          "min_loss_scale",
                          "bf16",
                          "gradient_clipping",
                          "default_chunk_size",
                          "use_cpu_embedding",
                          "release_after_init",
                          "model",
                          "preset",
                          "hidden",
                          "layers",
                          "heads",
                          "vocab_size",
                          "seq_len",
                          "init_from",
                          "data",
                          "path",
                          "dtype",
                          "text",
                          "sampling",
                          "training",
                          "steps",
                          "seed",
                          "log_interval",
                          "lr_schedule",
                          "warmup_steps",
                          "min_lr",
                          "engine",
                          "mode",
                          "distributed",
                          "backend",
                          "share_gpus"}) {
    expect_contains(text, {"\"" + std::string(key) + "\": "});
  }
  expect_contains(
      text, {"\"train_batch_size\": null", "\"hidden\": null", "\"default_chunk_size\": 67108864"});
}

// JSON nested a million levels deep: nlohmann parses it without recursion, but showing the value in
// a message (a wrong type at a known key) wrote it out recursively and overflowed the stack. Found
// by the config fuzz target's edge cases (tests/fuzz/config_fuzz.cpp, docs/fuzzing.md).
TEST(ConfigParse, DeeplyNestedJsonIsAConfigErrorNotACrash) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  expect_contains(config_error(with_data(R"("training": {"steps": )" + deep + "}")),
                  {"config.json: invalid JSON: nested deeper than 100 levels"});
  // The same through --set, whose VALUE is parsed as JSON.
  expect_contains(
      config_error(with_data(), {"training.steps=" + deep}),
      {"config.json: --set 'training.steps=[[[", "': VALUE is JSON nested deeper than 100 levels"});
  // Below the limit it parses, and only the type is wrong.
  const std::string limit = std::string(90, '[') + std::string(90, ']');
  expect_contains(config_error(with_data(R"("training": {"steps": )" + limit + "}")),
                  {"training.steps: expected a positive integer, found array"});
}

}  // namespace
}  // namespace pstar::config
