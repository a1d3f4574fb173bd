// Unknown config keys (formats/src/config/messages.cpp's typo suggestions): the full path, the
// closest known key, the known keys when nothing is close.
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

}  // namespace
}  // namespace pstar::config
