#include "pstar/generate/sampling.h"

#include <cmath>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "pstar/base/error.h"

namespace pstar::generate {

void check_sampling_options(const SamplingOptions& o) {
  PSTAR_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, ConfigError, "--temperature ",
              o.temperature, ": expected 0 (greedy) or more");
  PSTAR_CHECK(o.top_p > 0 && o.top_p <= 1, ConfigError, "--top-p ", o.top_p,
              ": expected a probability in (0, 1]");
  PSTAR_CHECK(o.top_k >= 0, ConfigError, "--top-k ", o.top_k, ": expected 0 (all) or more");
}

Sampler::Sampler(const SamplingOptions& options)
    : options_(options), generator_(at::make_generator<at::CPUGeneratorImpl>(options.seed)) {
  check_sampling_options(options_);
}

at::Tensor Sampler::next(const at::Tensor& logits) {
  if (options_.temperature == 0) return logits.argmax(-1).to(torch::kCPU, torch::kInt64);
  const auto minus_inf = -std::numeric_limits<double>::infinity();
  auto scores = logits.to(torch::kCPU, torch::kFloat64) / options_.temperature;
  const int64_t vocab = scores.size(-1);
  if (options_.top_k > 0 && options_.top_k < vocab) {
    // Ties with the k-th score stay in, as Hugging Face's TopKLogitsWarper keeps them.
    const auto kth = std::get<0>(scores.topk(options_.top_k, -1)).narrow(-1, options_.top_k - 1, 1);
    scores = scores.masked_fill(scores.lt(kth), minus_inf);
  }
  if (options_.top_p < 1) {
    // The fewest most likely tokens whose probabilities reach top_p: a token goes when the ones
    // before it already reach it (Hugging Face's TopPLogitsWarper); the most likely one stays.
    const auto [sorted, order] = scores.sort(-1, /*descending=*/true);
    const auto probs = sorted.softmax(-1);
    const auto before = probs.cumsum(-1) - probs;
    const auto drop = before.ge(options_.top_p);
    scores = scores.scatter(-1, order, sorted.masked_fill(drop, minus_inf));
  }
  const auto cdf = scores.softmax(-1).cumsum(-1);  // [batch, vocab]
  // A draw below the total, so that it lands on a kept token however the sum rounds.
  const auto u =
      at::rand({scores.size(0), 1}, generator_, torch::kFloat64) * cdf.narrow(-1, vocab - 1, 1);
  return torch::searchsorted(cdf, u, /*out_int32=*/false, /*right=*/true)
      .view({-1})
      .clamp_max(vocab - 1);
}

}  // namespace pstar::generate
