// The checks across the data keys (formats/src/config/data_checks.cpp): exactly one training
// source, and held-out data.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/config/config_fixtures.h"
#include "pstar/base/error.h"
#include "pstar/formats/config.h"

namespace pstar::config {
namespace {

using namespace fixtures;  // formats/config/config_fixtures.h

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

}  // namespace
}  // namespace pstar::config
