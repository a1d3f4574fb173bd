// Generation on a GPU against the float64 reference (tests/reference/decoder_reference.py
// --generate): with the cache, the cached attention's fused path (Note [fused attention]: the
// memory-efficient kernel with the slots' mask, keys repeated per head) and, without it, the
// packed records' fused path, for every family in fp32; in bf16 the greedy tokens of the CPU's
// fp32 run where its top two logits are far apart. Skipped, with the reason, without a GPU.
#include <string>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "engine/generate/generate_fixture.h"

namespace pstar::generate {
namespace {

using pstar::testing::GenerationReference;
using testing::follow;
using testing::load;

class GenerateGpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is usable here";
    ref_ = pstar::testing::generation_reference(GetParam());
    if (ref_ == nullptr) GTEST_SKIP() << "no Python with torch (Debian: python3-torch)";
  }
  const GenerationReference* ref_ = nullptr;
};

TEST_P(GenerateGpu, Fp32LogitsMatchTheFloat64ReferenceWithAndWithoutTheCache) {
  // TF32 is off by default in LibTorch; the fused kernels accumulate in fp32 in another order.
  constexpr double kTolerance = 5e-5;
  auto model = load(ref_->dir, /*seq_len=*/32, c10::Device(c10::kCUDA, 0));
  follow(*model, *ref_, ref_->forced, {0, 1, 2}, /*use_cache=*/true, kTolerance);
  follow(*model, *ref_, ref_->forced, {2}, /*use_cache=*/true, kTolerance);
  follow(*model, *ref_, ref_->forced, {0, 1, 2}, /*use_cache=*/false, kTolerance);
}

TEST_P(GenerateGpu, Bf16GreedyTokensAreTheReferencesWhereTheyAreClear) {
  auto model = load(ref_->dir, /*seq_len=*/32, c10::Device(c10::kCUDA, 0), torch::kBFloat16);
  // bf16 keeps 8 bits of mantissa: a margin of a tenth of the top logit is well outside its
  // rounding on these tiny models.
  const int64_t compared = testing::compare_greedy(*model, *ref_, 0.1);
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateGpu,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "gemma3_text",
                                           "phi3"));

}  // namespace
}  // namespace pstar::generate
