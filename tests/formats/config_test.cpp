// Tests for the `pstar train` config (formats/src/config.cpp): defaults, every key read, checks
// across keys, path resolution and file loading. Its parts have their own tests under
// tests/formats/config/: typed reads and ranges (level_test), unknown keys and typo suggestions
// (messages_test), --set and the JSON text (json_input_test), to_json_text (schema_test) and the
// checks across data keys (data_checks_test). Errors are checked by message substrings: the path,
// what was expected, what was found, the suggestion.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "formats/config/config_fixtures.h"
#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::config {
namespace {

namespace fs = std::filesystem;
using namespace fixtures;  // formats/config/config_fixtures.h

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
  // Kept as written, relative to the working directory like save_dir.
  EXPECT_EQ(c.training.tensorboard_dir, "runs/tiny");
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
  // Note [numa binding]: on by default, off from the file or --set, written back.
  EXPECT_TRUE(defaults.distributed.numa_bind);
  EXPECT_FALSE(parse(with_data(R"("distributed": {"numa_bind": false})")).distributed.numa_bind);
  const TrainConfig unbound = parse(with_data(), {"distributed.numa_bind=false"});
  EXPECT_FALSE(unbound.distributed.numa_bind);
  expect_same(parse(to_json_text(unbound)), unbound);
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

TEST(ConfigCross, MinLrMustNotExceedLr) {
  expect_contains(
      config_error(with_data(R"("optimizer": {"params": {"lr": 0.001}},
                                "training": {"lr_schedule": {"min_lr": 0.01}})")),
      {"training.lr_schedule.min_lr: expected a number in [0, optimizer.params.lr = 0.001], "
       "found 0.01"});
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

}  // namespace
}  // namespace pstar::config
