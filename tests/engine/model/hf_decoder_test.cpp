// Loading a Llama-family Hugging Face folder: the weights a Python script wrote by hand (two bf16
// shards and an index) give the loss that script's own forward computes; and each bad folder is
// a clear error naming what is wrong.
#include <cstdlib>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/hf_decoder_config.h"
#include "pstar/model/factory.h"
#include "pstar/model/decoder.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::model {
namespace {

using pstar::testing::message_of;
using pstar::testing::ScratchDir;

// Loads `dir` into a fresh model of its config.json's shape with `seq_len`, as the trainer does.
std::shared_ptr<CausalLM> load_folder(const std::string& dir, int64_t seq_len) {
  config::ModelConfig m;
  m.type = "";
  m.init_from = dir;
  m.seq_len = seq_len;
  const ModelShape shape = resolve_model_shape(m);
  auto model = build_causal_lm(shape);
  EXPECT_EQ(load_pretrained(shape, dir, *model),
            static_cast<int64_t>(shape.parameter_shapes().size()));
  return model;
}

TEST(HfLlamaTest, AFolderWrittenByPythonGivesTheLossOfItsOwnForward) {
  const std::string python = pstar::testing::python_with_torch();
  if (python.empty())
    GTEST_SKIP() << "no Python with torch (python3 -c 'import torch' fails; Debian: "
                    "apt-get install python3-torch)";
  ScratchDir dir;
  const std::string out = dir.file("tiny");
  const std::string command = python + " " + PSTAR_SOURCE_DIR +
                              "/examples/llama/make_tiny_llama.py --out " + out +
                              " --shards 2 --dtype bf16 --reference >/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const auto reference = nlohmann::json::parse(pstar::testing::read_text(out + "/reference.json"));
  std::vector<int64_t> flat;
  for (const auto& row : reference["ids"])
    for (const auto& id : row) flat.push_back(id.get<int64_t>());
  const int64_t rows = static_cast<int64_t>(reference["ids"].size());
  const auto ids = torch::tensor(flat, torch::kInt64).view({rows, -1});
  const int64_t seq = ids.size(1) - 1;

  const auto folder = formats::read_hf_folder(out);
  EXPECT_EQ(folder.shards.size(), 2u);
  auto model = load_folder(out, seq);
  // bf16 weights widened to fp32, as the script computes.
  for (const auto& item : model->named_parameters())
    EXPECT_EQ(item.value().scalar_type(), torch::kFloat32);
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(ids.narrow(1, 0, seq));
  const double loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                           ids.narrow(1, 1, seq).reshape({-1}))
                          .item<double>();
  const double want = reference["loss"].get<double>();
  EXPECT_NEAR(loss, want, 1e-5 * want);
}

// A small valid folder written here (fp32, one file or two shards), to break in each test.
class BadHfFolderTest : public ::testing::Test {
 protected:
  void write_folder(bool sharded) {
    c_ = *find_decoder_preset("llama-tiny");
    c_.layers = 1;
    pstar::testing::write_text(dir_.file("config.json"), decoder_config_to_hf_json(c_, "float32"));
    std::map<std::string, std::string> shard_of;
    formats::SafetensorsWriter first, second;
    int64_t i = 0;
    for (const auto& p : decoder_parameter_shapes(c_)) {
      const auto value = torch::randn(p.shape);
      auto& writer = (sharded && i++ % 2 == 1) ? second : first;
      writer.add(p.name, formats::DType::kF32, p.shape, value.data_ptr(), value.nbytes());
      shard_of[p.name] = (&writer == &first) ? "a.safetensors" : "b.safetensors";
    }
    if (sharded) {
      first.write(dir_.file("a.safetensors"));
      second.write(dir_.file("b.safetensors"));
      pstar::testing::write_text(dir_.file("model.safetensors.index.json"),
                                 formats::hf_index_json(shard_of, 0));
    } else {
      first.write(dir_.file("model.safetensors"));
    }
  }
  std::string error_of_loading() {
    return message_of<Error>([&] { load_folder(dir_.path().string(), 16); });
  }

  ScratchDir dir_;
  DecoderConfig c_;
};

TEST_F(BadHfFolderTest, GoodFoldersLoadWithOneFileOrShards) {
  write_folder(false);
  EXPECT_NO_THROW(load_folder(dir_.path().string(), 16));
  std::filesystem::remove(dir_.file("model.safetensors"));
  write_folder(true);
  EXPECT_NO_THROW(load_folder(dir_.path().string(), 16));
}

TEST_F(BadHfFolderTest, MissingConfigOrWeights) {
  write_folder(false);
  std::filesystem::remove(dir_.file("config.json"));
  std::string e = error_of_loading();
  EXPECT_NE(e.find("no config.json"), std::string::npos) << e;
  write_folder(false);
  std::filesystem::remove(dir_.file("model.safetensors"));
  e = error_of_loading();
  EXPECT_NE(e.find("neither model.safetensors nor model.safetensors.index.json"), std::string::npos)
      << e;
}

TEST_F(BadHfFolderTest, UnknownModelTypeListsTheKnownOnes) {
  write_folder(false);
  pstar::testing::write_text(dir_.file("config.json"), R"({"model_type": "falcon"})");
  const std::string e = error_of_loading();
  EXPECT_NE(e.find("\"falcon\""), std::string::npos) << e;
  EXPECT_NE(e.find("llama, mistral, qwen2"), std::string::npos) << e;
}

TEST_F(BadHfFolderTest, AShardTheIndexNamesIsMissing) {
  write_folder(true);
  std::filesystem::remove(dir_.file("b.safetensors"));
  const std::string e = error_of_loading();
  EXPECT_NE(e.find("names shard b.safetensors"), std::string::npos) << e;
}

TEST_F(BadHfFolderTest, TheIndexPointsAtAShardLackingTheTensor) {
  write_folder(true);
  auto index =
      nlohmann::json::parse(pstar::testing::read_text(dir_.file("model.safetensors.index.json")));
  index["weight_map"]["model.norm.weight"] =
      index["weight_map"]["model.norm.weight"] == "a.safetensors" ? "b.safetensors"
                                                                  : "a.safetensors";
  pstar::testing::write_text(dir_.file("model.safetensors.index.json"), index.dump());
  const std::string e = error_of_loading();
  EXPECT_NE(e.find("\"model.norm.weight\" is missing though the index assigns it"),
            std::string::npos)
      << e;
}

TEST_F(BadHfFolderTest, AMisshapedTensorIsNamedWithBothShapes) {
  write_folder(false);
  // A config that says 4 key/value heads where the weights have 2.
  DecoderConfig wider = c_;
  wider.kv_heads = 4;
  pstar::testing::write_text(dir_.file("config.json"), decoder_config_to_hf_json(wider, "float32"));
  const std::string e = error_of_loading();
  EXPECT_NE(e.find("\"model.layers.0.self_attn.k_proj.weight\" has shape [32, 64] but the model "
                   "needs [64, 64]"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace pstar::model
