// The CUDA Adam kernel's arithmetic, run on the CPU: adam_element.h compiled for the host (with
// -ffp-contract=off, as host Adam's files are) against optim::host_adam_step, bit for bit, and the
// kernel's coefficients against host Adam's. This checks the order of operations and the
// conversions on any machine; that the device's _rn intrinsics round as the host's operations do
// is IEEE 754's promise, checked on a GPU by adam_kernel_test.cpp (Note [cuda adam bit identity]).
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "adam_element.h"
#include "cuda_test_util.h"
#include "pstar/cuda/adam.h"
#include "pstar/optim/host_adam.h"

namespace pstar::cuda::test {
namespace {

using cuda::detail::WeightDecay;
using optim::GradType;
using optim::ParamOutType;

template <GradType G, ParamOutType P, WeightDecay W>
void emulate(const optim::detail::AdamCoeffs& c, const optim::AdamSpan& s) {
  for (int64_t i = 0; i < s.numel; ++i) {
    const float g = cuda::detail::grad_to_f32<G>(s.grad, i);
    float p = s.master[i];
    float m = s.exp_avg[i];
    float v = s.exp_avg_sq[i];
    cuda::detail::adam_element<W>(c, g, p, m, v);
    s.master[i] = p;
    s.exp_avg[i] = m;
    s.exp_avg_sq[i] = v;
    if constexpr (P != ParamOutType::kNone) {
      static_cast<uint16_t*>(s.param_out)[i] = cuda::detail::param_bits<P>(p);
    }
  }
}

template <GradType G, ParamOutType P>
void emulate_wd(const optim::detail::AdamCoeffs& c, const optim::AdamSpan& s) {
  if (!c.has_weight_decay) {
    emulate<G, P, WeightDecay::kNone>(c, s);
  } else if (c.decoupled) {
    emulate<G, P, WeightDecay::kDecoupled>(c, s);
  } else {
    emulate<G, P, WeightDecay::kL2>(c, s);
  }
}

template <GradType G>
void emulate_out(const optim::detail::AdamCoeffs& c, const optim::AdamSpan& s) {
  switch (s.param_out_type) {
    case ParamOutType::kNone:
      return emulate_wd<G, ParamOutType::kNone>(c, s);
    case ParamOutType::kBF16:
      return emulate_wd<G, ParamOutType::kBF16>(c, s);
    case ParamOutType::kF16:
      return emulate_wd<G, ParamOutType::kF16>(c, s);
  }
}

// What the kernel computes for a span, on the CPU.
void emulated_adam_step(const optim::AdamHyper& hyper, float grad_multiplier,
                        const optim::AdamSpan& s) {
  const optim::detail::AdamCoeffs c = optim::detail::make_adam_coeffs(hyper, grad_multiplier);
  switch (s.grad_type) {
    case GradType::kF32:
      return emulate_out<GradType::kF32>(c, s);
    case GradType::kBF16:
      return emulate_out<GradType::kBF16>(c, s);
    case GradType::kF16:
      return emulate_out<GradType::kF16>(c, s);
  }
}

// One span's buffers.
struct Buffers {
  AdamInputs state;
  std::vector<uint8_t> grad;
  std::vector<uint16_t> out;

  optim::AdamSpan span(const AdamCase& c, bool alias) {
    optim::AdamSpan s;
    s.master = state.master.data();
    s.exp_avg = state.exp_avg.data();
    s.exp_avg_sq = state.exp_avg_sq.data();
    s.grad = alias ? static_cast<const void*>(out.data()) : grad.data();
    s.grad_type = c.grad;
    s.param_out = c.out == ParamOutType::kNone ? nullptr : out.data();
    s.param_out_type = c.out;
    s.numel = static_cast<int64_t>(state.master.size());
    return s;
  }
};

class AdamEmulationTest : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamEmulationTest, MatchesHostAdamBitForBit) {
  const AdamCase c = GetParam();
  // Param/grad reuse needs a 16-bit gradient in the parameter copy's own dtype.
  const bool can_alias = (c.grad == GradType::kBF16 && c.out == ParamOutType::kBF16) ||
                         (c.grad == GradType::kF16 && c.out == ParamOutType::kF16);
  for (bool alias : {false, true}) {
    if (alias && !can_alias) continue;
    for (int64_t n : {1, 5, 1027, 70001}) {
      SCOPED_TRACE("numel " + std::to_string(n) + (alias ? ", grad in param_out" : ""));
      std::mt19937 rng(static_cast<uint32_t>(n * 7 + (alias ? 1 : 0)));
      Buffers host;
      host.state = random_state(n, rng);
      host.out.assign(static_cast<size_t>(n), 0);
      Buffers emulated = host;
      for (int64_t step : step_sequence()) {
        const std::vector<uint8_t> grad = random_grad(c.grad, n, rng);
        for (Buffers* b : {&host, &emulated}) {
          if (alias) {
            std::memcpy(b->out.data(), grad.data(), grad.size());
          } else {
            b->grad = grad;
          }
        }
        const optim::AdamHyper hyper = hyper_for(c.decay, step);
        optim::host_adam_step(hyper, kGradMultiplier, host.span(c, alias));
        emulated_adam_step(hyper, kGradMultiplier, emulated.span(c, alias));
        const std::string at = " after step " + std::to_string(step);
        EXPECT_EQ(
            count_f32_mismatches(host.state.master, emulated.state.master.data(), "master" + at),
            0);
        EXPECT_EQ(
            count_f32_mismatches(host.state.exp_avg, emulated.state.exp_avg.data(), "exp_avg" + at),
            0);
        EXPECT_EQ(count_f32_mismatches(host.state.exp_avg_sq, emulated.state.exp_avg_sq.data(),
                                       "exp_avg_sq" + at),
                  0);
        if (c.out != ParamOutType::kNone) {
          EXPECT_EQ(count_u16_mismatches(host.out, emulated.out.data(), c.out, "param_out" + at),
                    0);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, AdamEmulationTest, ::testing::ValuesIn(all_adam_cases()),
                         case_name);

// With lr = 0 the master passes through unchanged, so the 16-bit copies see exactly the edge values
// (ties, overflow, subnormals) and random bit patterns of every finite exponent.
TEST(AdamEmulationConversions, ParamCopiesOfEdgeValuesMatchHostAdam) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  std::vector<float> values;
  for (uint32_t i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    if ((u & 0x7F800000u) == 0x7F800000u) u ^= 0x00800000u;  // keep it finite
    float f;
    std::memcpy(&f, &u, 4);
    values.push_back(f);
  }
  // Ties and near-ties of both formats around their rounding points.
  for (uint32_t base : {0x3F800000u, 0x477FE000u, 0x38800000u, 0x33800000u, 0x33000000u}) {
    for (uint32_t low :
         {0x0FFFu, 0x1000u, 0x1001u, 0x2FFFu, 0x3000u, 0x7FFFu, 0x8000u, 0x8001u, 0x18000u}) {
      const uint32_t u = base + low;
      float f;
      std::memcpy(&f, &u, 4);
      values.push_back(f);
      values.push_back(-f);
    }
  }
  for (ParamOutType out : {ParamOutType::kBF16, ParamOutType::kF16}) {
    SCOPED_TRACE(name(out));
    const int64_t n = static_cast<int64_t>(values.size());
    Buffers host;
    host.state.master = values;
    host.state.exp_avg.assign(values.size(), 0.0f);
    host.state.exp_avg_sq.assign(values.size(), 0.0f);
    host.grad.assign(values.size() * 4, 0);
    host.out.assign(values.size(), 0);
    Buffers emulated = host;
    optim::AdamHyper hyper = hyper_for(Decay::kNone, 1);
    hyper.lr = 0.0f;
    const AdamCase c{GradType::kF32, out, Decay::kNone};
    optim::host_adam_step(hyper, 1.0f, host.span(c, false));
    emulated_adam_step(hyper, 1.0f, emulated.span(c, false));
    EXPECT_EQ(count_u16_mismatches(host.out, emulated.out.data(), out, "param_out"), 0);
    EXPECT_EQ(static_cast<int64_t>(host.out.size()), n);
  }
}

// Every 16-bit gradient pattern, NaNs and infinities included, through the kernel's conversions:
// with lr = 0, beta1 = 0 and a multiplier of 1, exp_avg becomes the gradient as fp32.
TEST(AdamEmulationConversions, EveryGradientBitPatternConvertsAsHostAdam) {
  for (GradType g : {GradType::kBF16, GradType::kF16}) {
    SCOPED_TRACE(name(g));
    std::vector<uint16_t> grads(65536);
    for (uint32_t i = 0; i < 65536; ++i) grads[i] = static_cast<uint16_t>(i);
    Buffers host;
    host.state.master.assign(65536, 1.0f);
    host.state.exp_avg.assign(65536, 0.0f);
    host.state.exp_avg_sq.assign(65536, 0.0f);
    host.grad.resize(65536 * 2);
    std::memcpy(host.grad.data(), grads.data(), host.grad.size());
    Buffers emulated = host;
    optim::AdamHyper hyper = hyper_for(Decay::kNone, 1);
    hyper.lr = 0.0f;
    hyper.beta1 = 0.0f;
    const AdamCase c{g, ParamOutType::kNone, Decay::kNone};
    optim::host_adam_step(hyper, 1.0f, host.span(c, false));
    emulated_adam_step(hyper, 1.0f, emulated.span(c, false));
    EXPECT_EQ(count_f32_mismatches(host.state.exp_avg, emulated.state.exp_avg.data(), "exp_avg"),
              0);
  }
}

}  // namespace
}  // namespace pstar::cuda::test
