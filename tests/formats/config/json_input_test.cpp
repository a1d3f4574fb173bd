// The config's JSON text and --set overrides (formats/src/config/json_input.cpp): how a VALUE is
// read, what an override replaces and creates, messages that name the --set, invalid JSON and the
// depth limit.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "formats/config/config_fixtures.h"
#include "pstar/base/error.h"
#include "pstar/formats/config.h"

namespace pstar::config {
namespace {

namespace fs = std::filesystem;
using namespace fixtures;  // formats/config/config_fixtures.h

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

TEST(ConfigJson, EmptyTextAndHugeNumbersAreConfigErrors) {
  expect_contains(config_error(""), {"config.json: invalid JSON: ", "line 1"});
  expect_contains(config_error(R"({"gradient_clipping": 1e999})"),
                  {"config.json: invalid JSON: ", "1e999"});
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
