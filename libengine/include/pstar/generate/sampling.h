// Choosing the next token from a step's logits: greedy, or drawn after temperature, top-k and top-p
// (Hugging Face's order), from a generator seeded once, so a seed repeats its completions.
#pragma once

#include <cstdint>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace pstar::generate {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (the most likely token; the first of equals)
  double top_p = 1;        // keep the most likely tokens whose probabilities reach top_p
  int64_t top_k = 0;       // keep the top_k most likely tokens; 0: all
  uint64_t seed = 0;       // of the draws
};

// ConfigError naming the flag and its value: a temperature below 0, a top-p outside (0, 1], a
// top-k below 0.
void check_sampling_options(const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // The next token of each row, [batch] int64 on the CPU, from logits [batch, vocab] of any
  // floating dtype and device. Each call draws one uniform number a row (CPU, float64) and takes
  // the token where the kept tokens' cumulative probability (float64, in vocabulary order) passes
  // it, so the draws do not depend on the device or on LibTorch's multinomial.
  at::Tensor next(const at::Tensor& logits);

 private:
  SamplingOptions options_;
  at::Generator generator_;
};

}  // namespace pstar::generate
