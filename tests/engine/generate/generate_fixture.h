// What the generation tests share (generate_test.cpp, generate_gpu_test.cpp): a family's
// reference folder loaded as pstar loads it, and a batch that follows the reference's tokens while
// every step's logits are compared with its float64 ones.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/family_folders.h"
#include "pstar/generate/generator.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"

namespace pstar::generate::testing {

using pstar::testing::GenerationReference;

// The family's folder as pstar loads it, with a model.seq_len shorter than the generated context
// (the cached path's positions do not depend on it), on `device` in `dtype`.
inline std::shared_ptr<model::CausalLM> load(const std::string& dir, int64_t seq_len = 8,
                                             c10::Device device = c10::kCPU,
                                             c10::ScalarType dtype = torch::kFloat32) {
  config::ModelConfig m;
  m.init_from = dir;
  m.seq_len = seq_len;
  const model::ModelShape shape = model::resolve_model_shape(m);
  model::BuildOptions options;
  options.initialise = false;
  auto model = model::build_causal_lm(shape, options);
  model::load_pretrained(shape, dir, *model);
  model->to(device, dtype);
  model->eval();
  return model;
}

// The largest difference between `got` ([vocab]) and `want`, over the largest |want|.
inline double logit_error(const torch::Tensor& got, const std::vector<double>& want) {
  const auto w = torch::tensor(want, torch::kFloat64);
  const double scale = std::max(1.0, w.abs().max().item<double>());
  return (got.to(torch::kCPU, torch::kFloat64) - w).abs().max().item<double>() / scale;
}

// Runs `rows` of the reference's prompts as one batch following `continuation`'s tokens (the
// cached path feeding the padded prompts in blocks of `prefill_block` slots), and checks every
// step's logits against it within `tolerance`; returns each step's logits.
inline std::vector<torch::Tensor> follow(model::CausalLM& model, const GenerationReference& ref,
                                         const GenerationReference::Continuation& continuation,
                                         const std::vector<size_t>& rows, bool use_cache,
                                         double tolerance, int64_t prefill_block = 512) {
  std::vector<std::vector<int64_t>> prompts;
  for (size_t r : rows) prompts.push_back(ref.prompts[r]);
  GenerateOptions options;
  options.max_new_tokens = pstar::testing::kGenerationSteps;
  options.use_cache = use_cache;
  options.context = 64;
  options.prefill_block = prefill_block;
  std::vector<torch::Tensor> seen;
  GenerateHooks hooks;
  hooks.on_logits = [&](int64_t step, const torch::Tensor& logits) {
    seen.push_back(logits.cpu().clone());
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& want = continuation.logits[rows[i]][static_cast<size_t>(step)];
      EXPECT_LE(logit_error(logits[static_cast<int64_t>(i)], want), tolerance)
          << "prompt " << rows[i] << " (batch row " << i << " of " << rows.size() << "), step "
          << step << (use_cache ? ", cached" : ", without the cache") << ", prompt blocks of "
          << prefill_block;
    }
  };
  hooks.override_ids = [&](int64_t step, torch::Tensor& ids) {
    for (size_t i = 0; i < rows.size(); ++i)
      ids[static_cast<int64_t>(i)] = continuation.tokens[rows[i]][static_cast<size_t>(step)];
  };
  const auto out = generate(model, prompts, options, hooks);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), pstar::testing::kGenerationSteps);
  for (const auto& c : out) EXPECT_EQ(c.reason, StopReason::kMaxNewTokens);
  return seen;
}

// Greedy completions of the reference's prompts on `model`, checked against the reference's
// greedy tokens while its top two logits differ by more than `margin` (relative to the top one,
// at least 1): near-ties, where either token is right, end a row's comparison. Returns how many
// tokens were compared.
inline int64_t compare_greedy(model::CausalLM& model, const GenerationReference& ref,
                              double margin) {
  GenerateOptions options;
  options.max_new_tokens = pstar::testing::kGenerationSteps;
  const auto out = generate(model, ref.prompts, options);
  int64_t compared = 0;
  for (size_t r = 0; r < ref.prompts.size(); ++r) {
    for (size_t s = 0; s < out[r].ids.size(); ++s) {
      auto logits = ref.greedy.logits[r][s];
      std::sort(logits.rbegin(), logits.rend());
      if (logits[0] - logits[1] <= margin * std::max(1.0, std::abs(logits[0]))) break;
      EXPECT_EQ(out[r].ids[s], ref.greedy.tokens[r][s]) << "prompt " << r << ", step " << s;
      ++compared;
    }
  }
  return compared;
}

}  // namespace pstar::generate::testing
