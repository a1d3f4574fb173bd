// The sampler on hand-made logits: what top-k and top-p keep, how often a token is drawn, and the
// options it refuses.
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/generate/sampling.h"

namespace pstar::generate {
namespace {

// How often each token is drawn in `draws` rows of the same logits.
std::vector<double> frequencies(const SamplingOptions& options, const std::vector<double>& logits,
                                int64_t draws = 4000) {
  Sampler sampler(options);
  const auto row = torch::tensor(logits, torch::kFloat32);
  const auto ids = sampler.next(row.unsqueeze(0).expand({draws, -1}));
  std::vector<double> count(logits.size());
  for (int64_t i = 0; i < draws; ++i) count[static_cast<size_t>(ids[i].item<int64_t>())] += 1;
  for (double& c : count) c /= static_cast<double>(draws);
  return count;
}

TEST(SamplingTest, DrawsFollowTheProbabilitiesTopKAndTopP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1.
  const std::vector<double> logits = {std::log(0.15), std::log(0.5), std::log(0.05), std::log(0.3)};
  SamplingOptions o;
  o.temperature = 1;
  o.seed = 1;
  const auto all = frequencies(o, logits);
  const std::vector<double> want = {0.15, 0.5, 0.05, 0.3};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(all[i], want[i], 0.03) << "token " << i;
  o.top_k = 2;  // tokens 1 and 3, renormalised: 0.625, 0.375
  auto f = frequencies(o, logits);
  EXPECT_EQ(f[0] + f[2], 0.0);
  EXPECT_NEAR(f[1], 0.625, 0.03);
  o.top_k = 0;
  o.top_p = 0.7;  // 0.5 does not reach 0.7, 0.5 + 0.3 does: tokens 1 and 3
  f = frequencies(o, logits);
  EXPECT_EQ(f[0] + f[2], 0.0);
  EXPECT_NEAR(f[3], 0.375, 0.03);
  o.top_p = 0.5;  // the first reaches it alone
  EXPECT_EQ(frequencies(o, logits)[1], 1.0);
  o.top_p = 1;
  o.temperature = 1e-3;  // all but greedy
  EXPECT_EQ(frequencies(o, logits)[1], 1.0);
}

TEST(SamplingTest, GreedyTakesTheLargestLogit) {
  Sampler greedy(SamplingOptions{});
  const auto ids = greedy.next(torch::tensor({{0.1, 3.0, -1.0}, {5.0, 4.0, 4.5}}));
  EXPECT_EQ(ids[0].item<int64_t>(), 1);
  EXPECT_EQ(ids[1].item<int64_t>(), 0);
}

TEST(SamplingTest, OptionsOutOfRangeAreErrorsNamingTheFlag) {
  auto message = [](SamplingOptions o) -> std::string {
    try {
      check_sampling_options(o);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  SamplingOptions o;
  o.temperature = -0.5;
  EXPECT_NE(message(o).find("--temperature -0.5"), std::string::npos) << message(o);
  o = {};
  o.top_p = 0;
  EXPECT_NE(message(o).find("--top-p 0"), std::string::npos) << message(o);
  o.top_p = 1.5;
  EXPECT_NE(message(o).find("--top-p 1.5"), std::string::npos) << message(o);
  o = {};
  o.top_k = -1;
  EXPECT_NE(message(o).find("--top-k -1"), std::string::npos) << message(o);
  EXPECT_EQ(message(SamplingOptions{}), "");
}

}  // namespace
}  // namespace pstar::generate
