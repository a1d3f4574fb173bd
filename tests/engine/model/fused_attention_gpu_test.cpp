// Note [fused attention] on a GPU: LibTorch's scaled_dot_product_attention, which the GPT and
// Llama models use on CUDA devices with LibTorch 2.x, against causal attention written here in
// float64 on the CPU from its definition (explicit loops over the keys a query may see), forward
// and backward, in fp32 and bf16; and with Note [packed attention]'s segment mask.
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "pstar/core/torch_compat.h"
#include "pstar/model/ops.h"

namespace pstar::model {
namespace {

// softmax over keys j <= i of (q_i · k_j) / sqrt(d), times v_j; float64 throughout.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v) {
  const int64_t seq = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < seq; ++i) {
    auto qi = q.select(2, i).unsqueeze(2);                 // [B, H, 1, d]
    auto kj = k.slice(2, 0, i + 1);                        // [B, H, i+1, d]
    auto w = (qi * kj).sum(-1, /*keepdim=*/true) * scale;  // [B, H, i+1, 1]
    w = (w - std::get<0>(w.max(2, true))).exp();
    w = w / w.sum(2, true);
    rows.push_back((w * v.slice(2, 0, i + 1)).sum(2));  // [B, H, d]
  }
  return torch::stack(rows, 2);
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want).norm().item<double>() / want.norm().item<double>();
}

class FusedAttentionGpu : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is usable here";
    if (!fused_attention_on_cuda())
      GTEST_SKIP() << "no fused path in this process: LibTorch " << compat::torch_version()
                   << " (scaled_dot_product_attention needs 2.0) or PSTAR_ATTENTION=explicit";
  }
};

TEST_P(FusedAttentionGpu, MatchesCausalAttentionInFloat64ForwardAndBackward) {
  const auto dtype = GetParam();
  // bf16 operands round to 8 bits of mantissa: errors near 1e-2 are rounding, not a wrong mask.
  const double tolerance = dtype == torch::kFloat32 ? 2e-5 : 2e-2;
  torch::manual_seed(7);
  const auto cpu64 = torch::dtype(torch::kFloat64);
  // batch 2, 4 heads, 80 positions (not a multiple of a tile), head size 64 as in the benchmarks.
  auto q64 = torch::randn({2, 4, 80, 64}, cpu64), k64 = torch::randn({2, 4, 80, 64}, cpu64),
       v64 = torch::randn({2, 4, 80, 64}, cpu64), dy64 = torch::randn({2, 4, 80, 64}, cpu64);
  auto on_gpu = [&](const torch::Tensor& t) {
    return t.to(torch::kCUDA).to(dtype).detach().requires_grad_(true);
  };
  auto q = on_gpu(q64), k = on_gpu(k64), v = on_gpu(v64);
  auto y = fused_causal_attention(q, k, v);
  ASSERT_TRUE(y.has_value()) << "the fused path must run for CUDA tensors with LibTorch 2.x";
  ASSERT_EQ(y->sizes(), q.sizes());
  y->backward(dy64.to(torch::kCUDA).to(dtype));

  // The reference sees the operands as the GPU did (rounded to dtype), in float64.
  auto rounded = [&](const torch::Tensor& t) {
    return t.to(dtype).to(torch::kFloat64).detach().requires_grad_(true);
  };
  auto rq = rounded(q64), rk = rounded(k64), rv = rounded(v64);
  auto ry = reference_attention(rq, rk, rv);
  ry.backward(dy64.to(dtype).to(torch::kFloat64));
  EXPECT_LT(relative_error(y->cpu(), ry), tolerance);
  EXPECT_LT(relative_error(q.grad().cpu(), rq.grad()), tolerance);
  EXPECT_LT(relative_error(k.grad().cpu(), rk.grad()), tolerance);
  EXPECT_LT(relative_error(v.grad().cpu(), rv.grad()), tolerance);
  // The mask: the first query sees only the first key, so its output is v_0.
  EXPECT_LT(relative_error(y->select(2, 0).cpu(), rv.select(2, 0).detach()), tolerance);
}

// Note [packed attention] on the fused path: a segment mask (three records and padding in a row
// of 80) against the explicit masked softmax in float64 on the CPU (mask_scores, the models'
// explicit path), forward and backward.
TEST_P(FusedAttentionGpu, PackedSegmentsMatchTheExplicitMaskInFloat64) {
  const auto dtype = GetParam();
  const double tolerance = dtype == torch::kFloat32 ? 2e-5 : 2e-2;
  torch::manual_seed(8);
  const auto cpu64 = torch::dtype(torch::kFloat64);
  auto q64 = torch::randn({2, 4, 80, 64}, cpu64), k64 = torch::randn({2, 4, 80, 64}, cpu64),
       v64 = torch::randn({2, 4, 80, 64}, cpu64), dy64 = torch::randn({2, 4, 80, 64}, cpu64);
  auto segments = torch::zeros({2, 80}, torch::kLong);
  segments[0].narrow(0, 20, 30).fill_(1);
  segments[0].narrow(0, 50, 30).fill_(2);
  segments[1].narrow(0, 77, 3).fill_(1);  // a record of 77, then padding
  const auto allowed = segment_causal_mask(segments);
  auto on_gpu = [&](const torch::Tensor& t) {
    return t.to(torch::kCUDA).to(dtype).detach().requires_grad_(true);
  };
  auto q = on_gpu(q64), k = on_gpu(k64), v = on_gpu(v64);
  auto y = fused_causal_attention(q, k, v, allowed.to(torch::kCUDA));
  ASSERT_TRUE(y.has_value());
  y->backward(dy64.to(torch::kCUDA).to(dtype));
  auto rounded = [&](const torch::Tensor& t) {
    return t.to(dtype).to(torch::kFloat64).detach().requires_grad_(true);
  };
  auto rq = rounded(q64), rk = rounded(k64), rv = rounded(v64);
  const auto scores = torch::matmul(rq, rk.transpose(-2, -1)) / std::sqrt(64.0);
  auto ry = torch::matmul(mask_scores(scores, allowed).softmax(-1), rv);
  ry.backward(dy64.to(dtype).to(torch::kFloat64));
  EXPECT_LT(relative_error(y->cpu(), ry), tolerance);
  EXPECT_LT(relative_error(q.grad().cpu(), rq.grad()), tolerance);
  EXPECT_LT(relative_error(k.grad().cpu(), rk.grad()), tolerance);
  EXPECT_LT(relative_error(v.grad().cpu(), rv.grad()), tolerance);
  // A record's first query sees only its own first key: position 20 of row 0 and 77 of row 1
  // (position 20 of row 1 is inside that row's first record and sees keys 0..20).
  for (const auto& [row, first] : {std::pair<int64_t, int64_t>{0, 20}, {0, 50}, {1, 77}})
    EXPECT_LT(relative_error(y->select(0, row).select(1, first).cpu(),
                             rv.select(0, row).select(1, first).detach()),
              tolerance)
        << "row " << row << ", position " << first;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedAttentionGpu,
                         ::testing::Values(torch::kFloat32, torch::kBFloat16),
                         [](const auto& info) {
                           return std::string(info.param == torch::kFloat32 ? "Fp32" : "Bf16");
                         });

TEST(FusedAttention, TheCpuComputesExplicitly) {
  auto q = torch::randn({1, 2, 8, 4});
  EXPECT_FALSE(fused_causal_attention(q, q, q).has_value())
      << "CPU tensors take the models' explicit path, which the float64 model tests check";
}

}  // namespace
}  // namespace pstar::model
