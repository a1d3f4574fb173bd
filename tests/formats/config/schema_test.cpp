// Writing the config back (formats/src/config/schema.cpp): to_json_text's round trip and its text.
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
                          "share_gpus",
                          "numa_bind"}) {
    expect_contains(text, {"\"" + std::string(key) + "\": "});
  }
  expect_contains(
      text, {"\"train_batch_size\": null", "\"hidden\": null", "\"default_chunk_size\": 67108864"});
}

}  // namespace
}  // namespace pstar::config
