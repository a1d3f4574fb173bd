// The decoder's maths and naming on Llama's shape. The reference forward below is written from
// Hugging Face's definitions (LlamaRMSNorm, the llama3 rope parameters, rotate_half, repeat_kv,
// eager attention, LlamaMLP) independently of model/decoder.cpp: float64, the inverse frequencies
// by a scalar loop, each query head's key/value head picked by index rather than by expanding, the
// causal mask by an explicit loop bound. The other families' features are checked against
// tests/reference/decoder_reference.py (family_test.cpp).
#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/model/decoder.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/ops.h"

namespace pstar::model {
namespace {

// Built with the counter-based init from `seed` (Note [counter-based init]).
BuildOptions seeded(uint64_t seed) {
  BuildOptions options;
  options.seed = seed;
  return options;
}

// Grouped-query attention (4 query heads, 2 key/value heads), rope_theta 500000, llama3 scaling
// whose band falls inside head_dim 16's wavelengths, an untied head.
DecoderConfig tiny() {
  DecoderConfig c = *find_decoder_preset("llama-tiny");
  c.seq_len = 12;
  return c;
}

// The scalar formula of Hugging Face's _compute_llama3_parameters, in double.
std::vector<double> reference_inverse_frequencies(const DecoderConfig& c) {
  std::vector<double> out;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    const RopeConfig& s = c.rope_of(LayerKind::kFull);
    double f = 1.0 / std::pow(s.theta, static_cast<double>(i) / c.head_dim);
    if (s.type == RopeType::kLlama3) {
      const double old = static_cast<double>(s.original_max_position_embeddings);
      const double wavelen = 2 * M_PI / f;
      if (wavelen > old / s.low_freq_factor) {
        f /= s.factor;
      } else if (wavelen >= old / s.high_freq_factor) {
        const double smooth =
            (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    out.push_back(f);
  }
  return out;
}

using Params = std::map<std::string, torch::Tensor>;

Params double_params(Decoder& model) {
  Params p;
  for (const auto& item : model.named_parameters())
    p[item.key()] = item.value().detach().to(torch::kFloat64).requires_grad_(true);
  return p;
}

torch::Tensor ref_linear(const Params& p, const std::string& name, const torch::Tensor& x) {
  auto y = torch::matmul(x, p.at(name + ".weight").t());
  if (p.count(name + ".bias")) y = y + p.at(name + ".bias");
  return y;
}

torch::Tensor ref_rms(const Params& p, const std::string& name, const torch::Tensor& x,
                      double eps) {
  return p.at(name + ".weight") * x / torch::sqrt((x * x).mean(-1, true) + eps);
}

// logits [B, S, V] in float64.
torch::Tensor reference_logits(const DecoderConfig& c, const Params& p, const torch::Tensor& ids) {
  const int64_t B = ids.size(0), S = ids.size(1), hd = c.head_dim;
  const auto f64 = torch::kFloat64;
  auto x =
      p.at("model.embed_tokens.weight").index_select(0, ids.reshape({-1})).view({B, S, c.hidden});
  // Angles pos·f_i for i < hd/2, repeated for the second half (HF's cat(freqs, freqs)).
  const auto inv = reference_inverse_frequencies(c);
  auto angle = torch::empty({S, hd}, f64);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < hd; ++i) angle[s][i] = static_cast<double>(s) * inv[i % (hd / 2)];
  const auto cos = angle.cos(), sin = angle.sin();
  auto rope = [&](const torch::Tensor& t) {  // t [B, n, S, hd]
    auto rotated = torch::cat({-t.narrow(-1, hd / 2, hd / 2), t.narrow(-1, 0, hd / 2)}, -1);
    return t * cos + rotated * sin;
  };
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const auto h = ref_rms(p, pre + "input_layernorm", x, c.norms.eps);
    auto q =
        rope(ref_linear(p, pre + "self_attn.q_proj", h).view({B, S, c.heads, hd}).transpose(1, 2));
    auto k = rope(
        ref_linear(p, pre + "self_attn.k_proj", h).view({B, S, c.kv_heads, hd}).transpose(1, 2));
    auto v =
        ref_linear(p, pre + "self_attn.v_proj", h).view({B, S, c.kv_heads, hd}).transpose(1, 2);
    std::vector<torch::Tensor> outs;
    const int64_t group = c.heads / c.kv_heads;
    for (int64_t head = 0; head < c.heads; ++head) {
      const auto qh = q.select(1, head), kh = k.select(1, head / group),
                 vh = v.select(1, head / group);
      std::vector<torch::Tensor> rows;
      for (int64_t s = 0; s < S; ++s) {  // position s attends to 0..s
        auto scores = torch::matmul(qh.narrow(1, s, 1), kh.narrow(1, 0, s + 1).transpose(1, 2)) /
                      std::sqrt(static_cast<double>(hd));
        auto w = torch::exp(scores - std::get<0>(scores.max(-1, true)));
        w = w / w.sum(-1, true);
        rows.push_back(torch::matmul(w, vh.narrow(1, 0, s + 1)));  // [B, 1, hd]
      }
      outs.push_back(torch::cat(rows, 1));  // [B, S, hd]
    }
    const auto attn = torch::stack(outs, 2).reshape({B, S, c.heads * hd});
    x = x + ref_linear(p, pre + "self_attn.o_proj", attn);
    const auto h2 = ref_rms(p, pre + "post_attention_layernorm", x, c.norms.eps);
    const auto gate = ref_linear(p, pre + "mlp.gate_proj", h2);
    const auto mlp = (gate / (1 + torch::exp(-gate))) * ref_linear(p, pre + "mlp.up_proj", h2);
    x = x + ref_linear(p, pre + "mlp.down_proj", mlp);
  }
  x = ref_rms(p, "model.norm", x, c.norms.eps);
  const auto& head =
      c.tie_word_embeddings ? p.at("model.embed_tokens.weight") : p.at("lm_head.weight");
  return torch::matmul(x, head.t());
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto flat = logits.reshape({-1, logits.size(-1)});
  const auto lse = flat.logsumexp(-1);
  return (lse - flat.gather(1, targets.reshape({-1, 1})).squeeze(1)).mean();
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want).abs().max().item<double>() /
         want.abs().max().item<double>();
}

TEST(DecoderTest, RopeInverseFrequenciesMatchTheLlama3Formula) {
  const DecoderConfig c = tiny();
  const auto got = rope_inverse_frequencies(c.rope_of(LayerKind::kFull), c.head_dim);
  const auto want = reference_inverse_frequencies(c);
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  // The test config puts frequencies in all three bands: divided, interpolated and kept.
  int divided = 0, kept = 0;
  DecoderConfig unscaled = c;
  unscaled.attention.rope[0].type = RopeType::kDefault;
  const auto plain = reference_inverse_frequencies(unscaled);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i].item<double>(), want[i], 1e-6 * want[i]) << "frequency " << i;
    divided += std::abs(want[i] - plain[i] / c.attention.rope[0].factor) < 1e-12 * plain[i];
    kept += want[i] == plain[i];
  }
  EXPECT_GT(divided, 0);
  EXPECT_GT(kept, 0);
  EXPECT_LT(divided + kept, static_cast<int>(want.size())) << "no frequency was interpolated";
}

TEST(DecoderTest, LogitsLossAndGradientsMatchAFloat64Reference) {
  for (bool qwen_biases : {false, true}) {
    SCOPED_TRACE(qwen_biases ? "q/k/v biases" : "no biases");
    DecoderConfig c = tiny();
    c.bias.qkv = qwen_biases;
    torch::manual_seed(3);  // the ids, targets and the biases' noise
    Decoder model(c, seeded(3));
    {
      torch::NoGradGuard no_grad;  // non-zero biases and norms, so that they are exercised
      for (auto& item : model.named_parameters())
        if (item.key().find("bias") != std::string::npos ||
            item.key().find("norm") != std::string::npos)
          item.value().add_(torch::randn_like(item.value()) * 0.1);
    }
    const auto ids = torch::randint(c.vocab_size, {2, c.seq_len}, torch::kInt64);
    const auto targets = torch::randint(c.vocab_size, {2, c.seq_len}, torch::kInt64);
    const auto logits = model.forward(ids);
    const auto loss = cross_entropy(logits, targets);
    loss.backward();

    Params p = double_params(model);
    const auto want_logits = reference_logits(c, p, ids);
    const auto want_loss = cross_entropy(want_logits, targets);
    want_loss.backward();
    EXPECT_LT(relative_error(logits, want_logits), 1e-5);
    EXPECT_NEAR(loss.item<double>(), want_loss.item<double>(), 1e-5 * want_loss.item<double>());
    for (const auto& item : model.named_parameters()) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      EXPECT_LT(relative_error(item.value().grad(), p.at(item.key()).grad()), 1e-4) << item.key();
    }
  }
}

TEST(DecoderTest, TiedHeadAndCheckpointingGiveTheSameNumbers) {
  DecoderConfig c = tiny();
  c.tie_word_embeddings = true;
  torch::manual_seed(5);  // the ids
  Decoder model(c, seeded(5));
  EXPECT_EQ(model.named_parameters().find("lm_head.weight"), nullptr);
  const auto ids = torch::randint(c.vocab_size, {2, c.seq_len}, torch::kInt64);
  Params p = double_params(model);
  EXPECT_LT(relative_error(model.forward(ids), reference_logits(c, p, ids)), 1e-5);

  // Activation checkpointing recomputes each layer in backward: bit-identical gradients.
  auto grads = [&](bool checkpointing) {
    model.set_activation_checkpointing(checkpointing);
    model.zero_grad();
    cross_entropy(model.forward(ids), ids).backward();
    std::vector<torch::Tensor> g;
    for (const auto& item : model.named_parameters()) g.push_back(item.value().grad().clone());
    return g;
  };
  const auto plain = grads(false), checkpointed = grads(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], checkpointed[i]));
}

TEST(DecoderTest, ParameterNamesShapesAndCountsFollowHuggingFace) {
  DecoderConfig c = tiny();
  c.bias.qkv = true;  // Qwen2's layout
  Decoder model(c);
  const auto shapes = decoder_parameter_shapes(c);
  auto params = model.named_parameters();
  ASSERT_EQ(params.size(), shapes.size());
  int64_t total = 0;
  for (const auto& s : shapes) {
    const auto* found = params.find(s.name);
    ASSERT_NE(found, nullptr) << s.name;
    EXPECT_EQ(found->sizes().vec(), s.shape) << s.name;
    total += found->numel();
  }
  EXPECT_EQ(total, c.num_params());
  // Hand-written from LlamaForCausalLM's layout for layer 0 (hidden 64, 4 heads and 2 key/value
  // heads of 16, intermediate 176, vocabulary 256).
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embed_tokens.weight", {256, 64}},
      {"model.layers.0.input_layernorm.weight", {64}},
      {"model.layers.0.self_attn.q_proj.weight", {64, 64}},
      {"model.layers.0.self_attn.q_proj.bias", {64}},
      {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
      {"model.layers.0.self_attn.k_proj.bias", {32}},
      {"model.layers.0.self_attn.v_proj.weight", {32, 64}},
      {"model.layers.0.self_attn.o_proj.weight", {64, 64}},
      {"model.layers.0.post_attention_layernorm.weight", {64}},
      {"model.layers.0.mlp.gate_proj.weight", {176, 64}},
      {"model.layers.0.mlp.up_proj.weight", {176, 64}},
      {"model.layers.0.mlp.down_proj.weight", {64, 176}},
      {"model.norm.weight", {64}},
      {"lm_head.weight", {256, 64}},
  };
  for (const auto& [name, shape] : expected) {
    const auto* found = params.find(name);
    ASSERT_NE(found, nullptr) << name;
    EXPECT_EQ(found->sizes().vec(), shape) << name;
  }
  EXPECT_EQ(params.find("model.layers.0.self_attn.o_proj.bias"), nullptr);
  // Leaf sizes in use order sum to the count.
  int64_t leaves = 0;
  for (int64_t n : decoder_leaf_module_numels(c)) leaves += n;
  EXPECT_EQ(leaves, c.num_params());
}

}  // namespace
}  // namespace pstar::model
