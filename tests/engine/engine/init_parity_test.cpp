// Note [counter-based init] through the engines: the initial model is the same, bit for bit, on
// the torch engine (the parameters as built) and in the chunk engine's chunks (written there
// straight from the generator), with a tight budget that starts chunks on the device side, and
// with 1, 2 or many threads. The values themselves are checked against a float64 reference in
// tests/engine/model/init_test.cpp; here they are checked against each other and against a model
// built on its own.
#include <cstring>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/small_gpt_config.h"
#include "pstar/base/strings.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

using Values = std::map<std::string, at::Tensor>;

// The fp32 value of every parameter as set-up leaves it: the chunk engine's masters (its state
// dict, which reads the chunks) or the torch engine's model.
Values initial_values(const config::TrainConfig& c, engine::ChunkedEngine** engine_out = nullptr,
                      ModelAndEngine* keep = nullptr) {
  ModelAndEngine built = build_model_and_engine(pstar::testing::cpu_plan(c));
  Values out;
  if (built.engine) {
    auto* chunked = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
    EXPECT_NE(chunked, nullptr);
    checkpoint::TensorList state;
    chunked->state_dict(state);
    for (const auto& [name, tensor] : state) {
      if (name == checkpoint::kAdamStep || ends_with(name, checkpoint::exp_avg_of("")) ||
          ends_with(name, checkpoint::exp_avg_sq_of("")))
        continue;
      out[name] = tensor;
    }
    if (engine_out != nullptr) *engine_out = chunked;
  } else {
    for (const auto& item : built.model->named_parameters())
      out[item.key()] = item.value().detach().clone();
  }
  if (keep != nullptr) *keep = std::move(built);
  return out;
}

void expect_same_bits(const Values& got, const Values& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    const at::Tensor g = it->second.contiguous(), v = w.contiguous();
    ASSERT_EQ(g.sizes(), v.sizes()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(g.data_ptr(), v.data_ptr(), static_cast<size_t>(v.nbytes())), 0)
        << what << ": " << name << " differs";
  }
}

class InitParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }
  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

TEST_F(InitParityTest, BothEnginesBudgetsAndPrecisionsStartFromTheSameValues) {
  const config::TrainConfig torch_config = pstar::testing::small_gpt_config(corpus_, "torch");
  const Values reference = initial_values(torch_config);
  // A model built on its own, with the seed: the same values as the torch engine's.
  Values alone;
  model::BuildOptions options;
  options.seed = torch_config.training.seed;
  const auto shape = model::resolve_model_shape(torch_config.model);
  for (const auto& item : model::build_causal_lm(shape, options)->named_parameters())
    alone[item.key()] = item.value().detach().clone();
  expect_same_bits(alone, reference, "a model built alone");

  config::TrainConfig c = pstar::testing::small_gpt_config(corpus_, "chunked");
  expect_same_bits(initial_values(c), reference, "chunk engine, fp32");

  // A host budget of a few chunks: the rest start on the device side (Note [fit]).
  config::TrainConfig tight = c;
  tight.engine.host_memory = int64_t{1} << 20;
  tight.engine.device_memory = int64_t{256} << 20;
  engine::ChunkedEngine* engine = nullptr;
  ModelAndEngine keep;
  expect_same_bits(initial_values(tight, &engine, &keep), reference, "chunk engine, tight host");
  ASSERT_NE(engine, nullptr);
  EXPECT_GT(engine->fit().device_chunks, 0) << "the tight budget put no chunk on the device";
  keep = ModelAndEngine{};

  // bf16: the masters are the same fp32 values, the compute copies their rounding to nearest even.
  config::TrainConfig bf16 = c;
  bf16.bf16.enabled = config::on_off(true);
  const Values masters = initial_values(bf16, nullptr, &keep);
  expect_same_bits(masters, reference, "chunk engine, bf16 masters");
  for (const auto& item : keep.model->named_parameters()) {
    const at::Tensor& param = item.value();
    ASSERT_EQ(param.scalar_type(), torch::kBFloat16) << item.key();
    EXPECT_TRUE(torch::equal(param, reference.at(item.key()).to(torch::kBFloat16))) << item.key();
  }
}

TEST_F(InitParityTest, OneTwoAndManyThreadsStartFromTheSameValues) {
  const config::TrainConfig c = pstar::testing::small_gpt_config(corpus_, "chunked");
  const int before = torch::get_num_threads();
  torch::set_num_threads(1);
  const Values one = initial_values(c);
  for (const int threads : {2, 7}) {
    torch::set_num_threads(threads);
    expect_same_bits(initial_values(c), one, str_cat(threads, " threads"));
  }
  torch::set_num_threads(before);
}

TEST_F(InitParityTest, LlamaStartsFromTheSameValuesOnBothEngines) {
  config::TrainConfig c = pstar::testing::small_gpt_config(corpus_, "torch");
  c.model = config::ModelConfig{};
  c.model.preset = "llama-tiny";
  c.model.seq_len = 32;
  const Values reference = initial_values(c);
  c.engine.mode = config::EngineMode::kChunked;
  expect_same_bits(initial_values(c), reference, "llama-tiny, chunk engine");
  // Another seed: other values.
  c.training.seed += 1;
  const Values other = initial_values(c);
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_FALSE(torch::equal(other.at(name), reference.at(name)));
}

}  // namespace
}  // namespace pstar::train
