// GPT shape, naming, init and maths. The forward/loss reference below is written independently of
// the model code: float64, explicit formulas for LayerNorm, GELU(tanh), softmax and cross-entropy.
#include <cmath>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/gpt.h"
#include "pstar/model/ops.h"

namespace pstar::model {
namespace {

// Built with the counter-based init from `seed` (Note [counter-based init]).
BuildOptions seeded(uint64_t seed) {
  BuildOptions options;
  options.seed = seed;
  return options;
}

GptConfig tiny(int64_t layers = 2) {
  GptConfig c;
  c.hidden = 32;
  c.layers = layers;
  c.heads = 4;
  c.vocab_size = 50;
  c.seq_len = 16;
  return c;
}

TEST(GptTest, ParameterNamesAndShapesMatchHuggingFaceGpt2) {
  Gpt model(tiny(2));
  std::map<std::string, std::vector<int64_t>> expected = {
      {"transformer.wte.weight", {50, 32}},
      {"transformer.wpe.weight", {16, 32}},
      {"transformer.ln_f.weight", {32}},
      {"transformer.ln_f.bias", {32}},
  };
  for (int i = 0; i < 2; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    expected[p + "ln_1.weight"] = {32};
    expected[p + "ln_1.bias"] = {32};
    expected[p + "attn.c_attn.weight"] = {32, 96};
    expected[p + "attn.c_attn.bias"] = {96};
    expected[p + "attn.c_proj.weight"] = {32, 32};
    expected[p + "attn.c_proj.bias"] = {32};
    expected[p + "ln_2.weight"] = {32};
    expected[p + "ln_2.bias"] = {32};
    expected[p + "mlp.c_fc.weight"] = {32, 128};
    expected[p + "mlp.c_fc.bias"] = {128};
    expected[p + "mlp.c_proj.weight"] = {128, 32};
    expected[p + "mlp.c_proj.bias"] = {32};
  }
  auto params = model.named_parameters();
  EXPECT_EQ(params.size(), expected.size());
  int64_t total = 0;
  for (const auto& item : params) {
    auto it = expected.find(item.key());
    ASSERT_NE(it, expected.end()) << "unexpected parameter " << item.key();
    EXPECT_EQ(item.value().sizes().vec(), it->second) << item.key();
    total += item.value().numel();
  }
  EXPECT_EQ(total, tiny(2).num_params());
}

TEST(GptTest, InitFollowsGpt2) {
  GptConfig c = tiny(8);
  c.hidden = 256;
  c.heads = 8;
  Gpt model(c);
  auto& t = model.transformer();
  EXPECT_NEAR(t.wte->weight.std().item<double>(), 0.02, 0.002);
  EXPECT_NEAR(t.h[0]->attn->c_attn->weight.std().item<double>(), 0.02, 0.001);
  const double residual = 0.02 / std::sqrt(2.0 * 8);
  EXPECT_NEAR(t.h[3]->attn->c_proj->weight.std().item<double>(), residual, residual * 0.05);
  EXPECT_NEAR(t.h[3]->mlp->c_proj->weight.std().item<double>(), residual, residual * 0.05);
  EXPECT_EQ(t.h[1]->mlp->c_fc->bias.abs().max().item<double>(), 0.0);
  EXPECT_EQ(t.ln_f->weight.min().item<double>(), 1.0);
  EXPECT_EQ(t.ln_f->bias.abs().max().item<double>(), 0.0);
}

// Independent float64 GPT-2 forward from the named parameters.
torch::Tensor reference_logits(Gpt& model, const torch::Tensor& ids) {
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : model.named_parameters())
    p[item.key()] = item.value().detach().to(torch::kFloat64);
  const auto& c = model.config();
  const int64_t B = ids.size(0), S = ids.size(1), H = c.hidden, nh = c.heads, hd = H / nh;
  auto layer_norm = [&](const torch::Tensor& x, const std::string& name) {
    auto mean = x.mean(-1, true);
    auto var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) / torch::sqrt(var + 1e-5) * p[name + ".weight"] + p[name + ".bias"];
  };
  auto conv1d = [&](const torch::Tensor& x, const std::string& name) {
    return torch::matmul(x, p[name + ".weight"]) + p[name + ".bias"];
  };
  auto gelu = [](const torch::Tensor& x) {
    return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
  };
  auto x = p["transformer.wte.weight"].index_select(0, ids.reshape({-1})).view({B, S, H}) +
           p["transformer.wpe.weight"].slice(0, 0, S).unsqueeze(0);
  auto allowed = torch::ones({S, S}, torch::kFloat64).tril();  // 1 where key <= query
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string pre = "transformer.h." + std::to_string(l) + ".";
    auto a = conv1d(layer_norm(x, pre + "ln_1"), pre + "attn.c_attn");
    auto q = a.slice(2, 0, H).view({B, S, nh, hd}).permute({0, 2, 1, 3});
    auto k = a.slice(2, H, 2 * H).view({B, S, nh, hd}).permute({0, 2, 1, 3});
    auto v = a.slice(2, 2 * H, 3 * H).view({B, S, nh, hd}).permute({0, 2, 1, 3});
    auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(hd));
    auto e = torch::exp(scores - std::get<0>(scores.max(-1, true))) * allowed;
    auto probs = e / e.sum(-1, true);
    auto y = torch::matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, S, H});
    x = x + conv1d(y, pre + "attn.c_proj");
    x = x + conv1d(gelu(conv1d(layer_norm(x, pre + "ln_2"), pre + "mlp.c_fc")), pre + "mlp.c_proj");
  }
  x = layer_norm(x, "transformer.ln_f");
  return torch::matmul(x, p["transformer.wte.weight"].t());
}

double reference_loss(const torch::Tensor& logits64, const torch::Tensor& targets) {
  auto flat = logits64.reshape({-1, logits64.size(-1)});
  auto m = std::get<0>(flat.max(-1, true));
  auto lse = (flat - m).exp().sum(-1).log() + m.squeeze(-1);
  auto picked = flat.gather(1, targets.reshape({-1, 1})).squeeze(1);
  return (lse - picked).mean().item<double>();
}

TEST(GptTest, ForwardAndLossMatchIndependentFloat64Computation) {
  torch::manual_seed(3);  // the values below and the ids
  GptConfig c = tiny(3);
  Gpt model(c, seeded(3));
  {
    // Non-trivial LayerNorm and bias values so every term is exercised.
    torch::NoGradGuard g;
    for (auto& p : model.parameters())
      if (p.dim() == 1) p.add_(torch::randn_like(p) * 0.1);
  }
  auto ids = torch::randint(0, c.vocab_size, {3, c.seq_len}, torch::kLong);
  auto targets = torch::randint(0, c.vocab_size, {3, c.seq_len}, torch::kLong);
  auto logits = model.forward(ids);
  ASSERT_EQ(logits.sizes().vec(), (std::vector<int64_t>{3, c.seq_len, c.vocab_size}));
  auto ref = reference_logits(model, ids);
  EXPECT_LT((logits.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-5);
  const double loss = torch::nn::functional::cross_entropy(logits.reshape({-1, c.vocab_size}),
                                                           targets.reshape({-1}))
                          .item<double>();
  const double expected = reference_loss(ref, targets);
  EXPECT_NEAR(loss, expected, 1e-5 * expected);
  // At init the loss is close to ln(vocab): a sanity check on the scale of the logits.
  EXPECT_NEAR(expected, std::log(static_cast<double>(c.vocab_size)), 0.5);
}

TEST(GptTest, IsCausal) {
  torch::manual_seed(1);  // the ids
  Gpt model(tiny(2), seeded(1));
  auto ids = torch::randint(0, 50, {1, 16}, torch::kLong);
  auto changed = ids.clone();
  changed.index_put_({0, 10}, (ids.index({0, 10}) + 1) % 50);
  auto a = model.forward(ids), b = model.forward(changed);
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 10), b.slice(1, 0, 10)));
  EXPECT_FALSE(torch::allclose(a.slice(1, 10), b.slice(1, 10)));
}

TEST(GptTest, Bf16ForwardTracksFp32) {
  torch::manual_seed(2);  // the ids
  Gpt model(tiny(2), seeded(2));
  auto ids = torch::randint(0, 50, {2, 16}, torch::kLong);
  auto fp32 = model.forward(ids);
  model.to(torch::kBFloat16);
  auto bf16 = model.forward(ids);
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  EXPECT_LT((bf16.to(torch::kFloat32) - fp32).abs().max().item<double>(), 0.05);
}

TEST(GptTest, RejectsSequencesLongerThanSeqLen) {
  Gpt model(tiny(1));
  auto ids = torch::zeros({1, 17}, torch::kLong);
  EXPECT_THROW(model.forward(ids), ConfigError);
}

TEST(GptConfigTest, PresetsAndOverrides) {
  config::ModelConfig m;
  m.preset = "GPT3_10B";
  auto c = resolve_gpt_config(m);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.layers, 50);
  EXPECT_EQ(c.vocab_size, 50257);
  // PatrickStar counts 12·L·h² for its names: ~10B here.
  EXPECT_NEAR(static_cast<double>(c.num_params()) / 1e9, 10.3, 0.3);
  m.preset = "gpt-mini";
  m.seq_len = 64;
  m.vocab_size = 300;
  c = resolve_gpt_config(m);
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.seq_len, 64);
  EXPECT_EQ(c.vocab_size, 300);
  for (const auto& p : gpt_presets()) EXPECT_EQ(p.hidden % p.heads, 0) << p.name;
}

TEST(GptConfigTest, ErrorsNameTheKey) {
  config::ModelConfig m;
  m.preset = "GPT3_11B";
  try {
    resolve_gpt_config(m);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.preset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GPT3_10B"), std::string::npos) << e.what();
  }
  config::ModelConfig partial;
  partial.hidden = 64;
  partial.heads = 4;
  try {
    resolve_gpt_config(partial);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers"), std::string::npos) << e.what();
  }
  partial.layers = 2;
  partial.heads = 5;
  try {
    resolve_gpt_config(partial);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("divisible"), std::string::npos) << e.what();
  }
}

TEST(OpsTest, LinearMatchesLibTorchAndSavesTheWeightItself) {
  torch::manual_seed(4);
  for (bool with_bias : {true, false}) {
    auto x = torch::randn({3, 5, 8}, torch::requires_grad());
    auto w = torch::randn({6, 8}, torch::requires_grad());
    auto b = torch::randn({6}, torch::requires_grad());
    auto y = pstar::model::linear(x, w, with_bias ? b : torch::Tensor());
    auto x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
    auto b2 = b.detach().clone().requires_grad_();
    auto ref = torch::nn::functional::linear(x2, w2, with_bias ? b2 : torch::Tensor());
    EXPECT_TRUE(torch::allclose(y, ref, 1e-6, 1e-6));
    auto g = torch::randn_like(ref);
    y.backward(g);
    ref.backward(g);
    EXPECT_TRUE(torch::allclose(x.grad(), x2.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(w.grad(), w2.grad(), 1e-5, 1e-6));
    if (with_bias) {
      EXPECT_TRUE(torch::allclose(b.grad(), b2.grad(), 1e-5, 1e-6));
    }
  }
  // Backward reads the weight's current data: re-pointing it (as the chunk engine does when it
  // moves a chunk) is followed. Moving the same values elsewhere gives the same gradients.
  auto x = torch::randn({4, 8}, torch::requires_grad());
  auto w = torch::randn({6, 8}, torch::requires_grad());
  auto y = pstar::model::linear(x, w);
  auto expected = torch::matmul(torch::ones({4, 6}), w.detach());
  {
    torch::NoGradGuard no_grad;
    w.set_data(w.detach().clone());  // same values, new memory
  }
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), expected));
}

}  // namespace
}  // namespace pstar::model
