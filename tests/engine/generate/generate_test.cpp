// Generation against the float64 reference of tests/reference/decoder_reference.py --generate
// (written from Hugging Face's modeling code; every prompt alone, the whole sequence a step, no
// cache): pstar's logits at every step, with the key/value cache (Note [kv cache]) and without,
// batched with left padding and alone, for every family; greedy tokens; sampling; stops.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/generate/generate_fixture.h"
#include "pstar/base/error.h"
#include "pstar/generate/generator.h"
#include "pstar/model/factory.h"
#include "pstar/model/gpt.h"
#include "pstar/model/model_shape.h"

namespace pstar::generate {
namespace {

using pstar::testing::GenerationReference;
using testing::follow;
using testing::load;

constexpr double kTolerance = 1e-5;  // fp32 against float64, relative to the largest logit

class GenerateFamilyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GenerateFamilyTest, LogitsMatchTheFloat64ReferenceAtEveryStep) {
  const GenerationReference* ref = pstar::testing::generation_reference(GetParam());
  if (ref == nullptr)
    GTEST_SKIP() << "no Python with torch to write the reference (Debian: apt-get install "
                    "python3-torch)";
  auto model = load(ref->dir);
  // The prompts of different lengths as one left-padded batch, and each alone.
  const auto batched = follow(*model, *ref, ref->forced, {0, 1, 2}, /*use_cache=*/true, kTolerance);
  for (size_t r = 0; r < ref->prompts.size(); ++r)
    follow(*model, *ref, ref->forced, {r}, /*use_cache=*/true, kTolerance);
  // Without the cache (a forward over every slot a step, Note [packed attention] for the padding,
  // which model.seq_len must hold): the same logits.
  const auto full = follow(*load(ref->dir, /*seq_len=*/32), *ref, ref->forced, {0, 1, 2},
                           /*use_cache=*/false, kTolerance);
  for (size_t s = 0; s < batched.size(); ++s)
    EXPECT_TRUE(torch::allclose(batched[s], full[s], /*rtol=*/1e-5, /*atol=*/1e-5)) << "step " << s;
}

// Greedy tokens equal the reference's where its top two logits differ by more than the tolerance
// (random tiny models have near-ties, where either token is right), up to the first near-tie.
TEST_P(GenerateFamilyTest, GreedyTokensAreTheReferences) {
  const GenerationReference* ref = pstar::testing::generation_reference(GetParam());
  if (ref == nullptr) GTEST_SKIP() << "no Python with torch (Debian: python3-torch)";
  auto model = load(ref->dir);
  const int64_t compared = testing::compare_greedy(*model, *ref, kTolerance);
  EXPECT_GE(compared, 12) << "too few tokens outside near-ties to compare";
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateFamilyTest,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "gemma3_text",
                                           "phi3", "mixtral", "qwen3_moe"));

TEST(GenerateTest, ASeedRepeatsItsSamplesAndTopK1IsGreedy) {
  const GenerationReference* ref = pstar::testing::generation_reference("llama");
  if (ref == nullptr) GTEST_SKIP() << "no Python with torch (Debian: python3-torch)";
  auto model = load(ref->dir);
  auto run = [&](SamplingOptions sampling) {
    GenerateOptions options;
    options.max_new_tokens = 12;
    options.sampling = sampling;
    std::vector<std::vector<int64_t>> ids;
    for (const auto& c : generate(*model, ref->prompts, options)) ids.push_back(c.ids);
    return ids;
  };
  SamplingOptions sampled;
  sampled.temperature = 1.5;
  sampled.top_p = 0.95;
  sampled.seed = 5;
  const auto first = run(sampled);
  EXPECT_EQ(run(sampled), first);
  sampled.seed = 6;
  EXPECT_NE(run(sampled), first) << "the seed changes nothing";
  SamplingOptions top1;
  top1.temperature = 1;
  top1.top_k = 1;
  top1.seed = 9;
  EXPECT_EQ(run(top1), run(SamplingOptions{}));
  EXPECT_NE(run(SamplingOptions{}), first) << "sampling at temperature 1.5 drew the greedy tokens";
}

TEST(GenerateTest, RowsStopAtStopTokensMaxNewTokensAndTheContext) {
  const GenerationReference* ref = pstar::testing::generation_reference("mistral");
  if (ref == nullptr) GTEST_SKIP() << "no Python with torch (Debian: python3-torch)";
  auto model = load(ref->dir);
  // Prompt 0 stops at one of its greedy tokens that the others do not draw first; prompt 1 at
  // max_new_tokens (5); prompt 2 (13 tokens) reaches a context of 16 after 3.
  const auto& greedy = ref->greedy.tokens;
  auto drawn_by_others = [&](int64_t id) {
    return std::count(greedy[1].begin(), greedy[1].begin() + 5, id) +
               std::count(greedy[2].begin(), greedy[2].begin() + 3, id) >
           0;
  };
  size_t stop_at = 1;
  while (stop_at < 5 && drawn_by_others(greedy[0][stop_at])) ++stop_at;
  ASSERT_LT(stop_at, 5U) << "no stop token to choose";
  GenerateOptions options;
  options.max_new_tokens = 5;
  options.stop_ids = {greedy[0][stop_at]};
  options.context = 16;
  int64_t forwards = 0;
  GenerateHooks hooks;
  hooks.on_logits = [&](int64_t, const torch::Tensor&) { ++forwards; };
  const auto out = generate(*model, ref->prompts, options, hooks);
  EXPECT_EQ(out[0].reason, StopReason::kStopToken);
  EXPECT_EQ(out[0].stop_id, greedy[0][stop_at]);
  EXPECT_EQ(out[0].ids, std::vector<int64_t>(greedy[0].begin(), greedy[0].begin() + stop_at));
  EXPECT_EQ(out[1].reason, StopReason::kMaxNewTokens);
  EXPECT_EQ(out[1].ids, std::vector<int64_t>(greedy[1].begin(), greedy[1].begin() + 5));
  EXPECT_EQ(out[2].reason, StopReason::kContext);
  EXPECT_EQ(out[2].ids.size(), 3U);
  EXPECT_EQ(forwards, 5);
  options.context = 13;
  try {
    generate(*model, ref->prompts, options);
    ADD_FAILURE() << "a prompt as long as the context was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 2 has 13 tokens"), std::string::npos) << e.what();
  }
}

// GPT has no cache: each step a forward over the padded rows (Note [packed attention]); a batch
// gives each prompt the logits it has alone.
TEST(GenerateTest, GptRowsOfABatchHaveTheirLogitsAlone) {
  model::GptConfig c;
  c.vocab_size = 50;
  c.seq_len = 32;
  c.hidden = 32;
  c.heads = 4;
  c.layers = 2;
  model::BuildOptions build;
  build.seed = 3;
  auto gpt = std::make_shared<model::Gpt>(c, build);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4, 5, 6}, {7, 8}, {9, 10, 11}};
  GenerateOptions options;
  options.max_new_tokens = 4;
  std::vector<torch::Tensor> batched;
  GenerateHooks hooks;
  hooks.on_logits = [&](int64_t, const torch::Tensor& l) { batched.push_back(l.clone()); };
  const auto together = generate(*gpt, prompts, options, hooks);
  for (size_t r = 0; r < prompts.size(); ++r) {
    std::vector<torch::Tensor> alone;
    GenerateHooks one;
    one.on_logits = [&](int64_t, const torch::Tensor& l) { alone.push_back(l.clone()); };
    EXPECT_EQ(generate(*gpt, {prompts[r]}, options, one)[0].ids, together[r].ids);
    for (size_t s = 0; s < alone.size(); ++s)
      EXPECT_TRUE(torch::allclose(alone[s][0], batched[s][static_cast<int64_t>(r)], 1e-5, 1e-5))
          << "prompt " << r << ", step " << s;
  }
}

}  // namespace
}  // namespace pstar::generate
