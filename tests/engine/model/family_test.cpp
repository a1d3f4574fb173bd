// Every family's folder (tests/reference/decoder_reference.py: written from Hugging Face's modeling
// code, losses in float64) loads and gives its first loss; and every feature of the family matters:
// switched off, the same folder gives a loss far outside the tolerance, so a family whose feature
// pstar dropped would fail the first check.
#include <functional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/family_folders.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/model/decoder.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"
#include "test_util.h"

namespace pstar::model {
namespace {

using pstar::testing::FamilyFolder;

constexpr double kTolerance = 1e-5;  // relative, fp32 against float64
constexpr double kMatters = 1e-3;    // a switched-off feature moves the loss at least this much

// The first step's windows of the folder's tokens: `batch` rows of seq + 1 ids.
torch::Tensor first_batch(const FamilyFolder& f) {
  const std::vector<uint8_t> bytes = pstar::testing::read_bytes(f.tokens);
  std::vector<int64_t> ids;
  for (int64_t j = 0; j < f.batch; ++j)
    for (int64_t i = 0; i <= f.seq; ++i) {
      const size_t at = static_cast<size_t>(2 * (j * f.seq + i));
      ids.push_back(bytes[at] | (bytes[at + 1] << 8));
    }
  return torch::tensor(ids, torch::kInt64).view({f.batch, f.seq + 1});
}

// A change to the network: to its config before it is built, or to the model once it is loaded.
struct Change {
  const char* what;
  std::function<void(DecoderConfig&)> config;
  std::function<void(CausalLM&)> model;
};

// The loss of the folder's first batch in fp32, with `change` applied.
double first_loss(const FamilyFolder& f, const Change& change = {}) {
  config::ModelConfig m;
  m.init_from = f.dir;
  m.seq_len = f.seq;
  ModelShape shape = resolve_model_shape(m);
  if (change.config) change.config(shape.decoder);
  BuildOptions options;
  options.initialise = false;
  auto model = build_causal_lm(shape, options);
  load_pretrained(shape, f.dir, *model);
  if (change.model) change.model(*model);
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = first_batch(f);
  const auto logits = model->forward(ids.narrow(1, 0, f.seq));
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              ids.narrow(1, 1, f.seq).reshape({-1}))
      .item<double>();
}

void swap_parameters(CausalLM& model, const std::string& a, const std::string& b) {
  torch::NoGradGuard no_grad;
  auto params = model.named_parameters();
  const auto saved = params[a].clone();
  params[a].copy_(params[b]);
  params[b].copy_(saved);
}

struct FamilyCase {
  const char* family;
  const char* variant;
  std::vector<Change> features;
};

class FamilyTest : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(FamilyTest, TheFolderGivesTheReferenceLossAndEveryFeatureMatters) {
  const FamilyCase& c = GetParam();
  const FamilyFolder* f = pstar::testing::family_folder(c.family, c.variant);
  if (f == nullptr)
    GTEST_SKIP() << "no Python with torch to write the reference folders (Debian: apt-get "
                    "install python3-torch)";
  const double want = f->losses.at(0);
  EXPECT_NEAR(first_loss(*f), want, kTolerance * want);
  for (const Change& change : c.features) {
    const double off = first_loss(*f, change);
    EXPECT_GT(std::abs(off - want), kMatters * want)
        << change.what << " switched off leaves the loss at " << off << " against " << want;
  }
}

void all_full(DecoderConfig& c) {
  c.attention.layer_kinds.assign(static_cast<size_t>(c.layers), LayerKind::kFull);
}

const std::vector<FamilyCase> kCases = {
    {"llama",
     "",
     {{"llama3 rope scaling",
       [](DecoderConfig& c) {
         c.attention.rope[0].type = c.attention.rope[1].type = RopeType::kDefault;
       },
       nullptr}}},
    {"mistral", "", {{"the sliding window (6 of 16 positions)", all_full, nullptr}}},
    {"qwen2", "", {{"q/k/v biases", [](DecoderConfig& c) { c.bias.qkv = false; }, nullptr}}},
    // Its head_dim (16) is not hidden / heads (8): a model that derived it would not load.
    {"qwen3", "", {{"q/k norms", [](DecoderConfig& c) { c.norms.qk = false; }, nullptr}}},
    {"gemma3_text",
     "",
     {{"q/k norms", [](DecoderConfig& c) { c.norms.qk = false; }, nullptr},
      {"four norms a block", [](DecoderConfig& c) { c.norms.sandwich = false; }, nullptr},
      {"RMSNorm's (1 + w)", [](DecoderConfig& c) { c.norms.kind = NormKind::kWeight; }, nullptr},
      {"the embedding scale", [](DecoderConfig& c) { c.embed_scale = false; }, nullptr},
      {"the local layers' rope base",
       [](DecoderConfig& c) { c.attention.rope[1] = c.attention.rope[0]; }, nullptr},
      {"the global layers' linear rope scaling",
       [](DecoderConfig& c) { c.attention.rope[0].type = RopeType::kDefault; }, nullptr},
      {"the sliding window (5 of 16 positions)", all_full, nullptr},
      {"query_pre_attn_scalar", [](DecoderConfig& c) { c.attention.query_pre_attn_scalar = 0; },
       nullptr},
      {"tanh-GELU", [](DecoderConfig& c) { c.activation = MlpActivation::kSilu; }, nullptr}}},
    {"gemma3_text", "rope_parameters", {}},
    {"gemma3_text", "wrapped", {}},
    {"gemma3_text", "wrapped_v5", {}},
    {"phi3",
     "",
     {{"qkv_proj's order (q, k, v)", nullptr,
       [](CausalLM& m) {
         swap_parameters(m, "model.layers.0.self_attn.k_proj.weight",
                         "model.layers.0.self_attn.v_proj.weight");
       }},
      {"gate_up_proj's order (gate, up)", nullptr,
       [](CausalLM& m) {
         swap_parameters(m, "model.layers.0.mlp.gate_proj.weight",
                         "model.layers.0.mlp.up_proj.weight");
       }}}},
};

INSTANTIATE_TEST_SUITE_P(Families, FamilyTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<FamilyCase>& info) {
                           std::string name = std::string(info.param.family) + info.param.variant;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// A Gemma 3 4B-27B folder: the language model trains, the vision tower is read past.
TEST(FamilyFolderTest, AWrappingFolderLoadsItsLanguageModel) {
  for (const char* variant : {"wrapped", "wrapped_v5"}) {
    SCOPED_TRACE(variant);
    const FamilyFolder* f = pstar::testing::family_folder("gemma3_text", variant);
    if (f == nullptr)
      GTEST_SKIP() << "no Python with torch (Debian: apt-get install python3-torch)";
    config::ModelConfig m;
    m.init_from = f->dir;
    const ModelShape shape = resolve_model_shape(m);
    ASSERT_TRUE(shape.decoder.hf.wrapper.has_value());
    EXPECT_EQ(shape.decoder.hf.wrapper->weight_prefix, std::string(variant) == "wrapped"
                                                           ? "language_model.model."
                                                           : "model.language_model.");
    // Gemma3TextConfig's defaults for the keys the text_config leaves out.
    EXPECT_EQ(shape.decoder.heads, 8);
    EXPECT_EQ(shape.decoder.kv_heads, 4);
    EXPECT_EQ(shape.decoder.rope_of(LayerKind::kSliding).theta, 10000.0);
    EXPECT_EQ(shape.decoder.rope_of(LayerKind::kFull).theta, 1e6);
  }
}

}  // namespace
}  // namespace pstar::model
