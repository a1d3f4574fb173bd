// Host Adam against torch::optim::Adam/AdamW 1.13, every ISA against the scalar reference bit for
// bit, and grad_sq_sum against a double reference and across thread counts.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "host_adam_test_util.h"
#include "pstar/base/error.h"
#include "pstar/core/torch_compat.h"
#include "pstar/optim/host_adam.h"

namespace {

using pstar::optim::AdamHyper;
using pstar::optim::AdamSpan;
using pstar::optim::GradType;
using pstar::optim::ParamOutType;
using pstar::optim::detail::Isa;
using pstar::test::available_isas;
using pstar::test::bits_of;
using pstar::test::expect_same_bits;
using pstar::test::ScopedIsa;
using pstar::test::ScopedOmpThreads;

torch::ScalarType grad_dtype(GradType type) {
  switch (type) {
    case GradType::kF32:
      return torch::kFloat;
    case GradType::kBF16:
      return torch::kBFloat16;
    case GradType::kF16:
      return torch::kHalf;
  }
  return torch::kFloat;
}

torch::ScalarType out_dtype(ParamOutType type) {
  switch (type) {
    case ParamOutType::kNone:
      return torch::kFloat;
    case ParamOutType::kBF16:
      return torch::kBFloat16;
    case ParamOutType::kF16:
      return torch::kHalf;
  }
  return torch::kFloat;
}

// Our optimizer state for one tensor, held in LibTorch tensors.
struct HostState {
  torch::Tensor master, exp_avg, exp_avg_sq, out;
  ParamOutType out_type = ParamOutType::kNone;

  HostState(const torch::Tensor& init, ParamOutType type)
      : master(init.clone()),
        exp_avg(torch::zeros_like(init)),
        exp_avg_sq(torch::zeros_like(init)),
        out_type(type) {
    if (type != ParamOutType::kNone) out = torch::zeros(init.sizes(), out_dtype(type));
  }

  // grad must be contiguous and of the dtype of `grad_type`.
  void step(const AdamHyper& hyper, float grad_scale, const torch::Tensor& grad,
            GradType grad_type) {
    AdamSpan span;
    span.master = master.data_ptr<float>();
    span.exp_avg = exp_avg.data_ptr<float>();
    span.exp_avg_sq = exp_avg_sq.data_ptr<float>();
    span.grad = grad.data_ptr();
    span.grad_type = grad_type;
    span.param_out = out_type == ParamOutType::kNone ? nullptr : out.data_ptr();
    span.param_out_type = out_type;
    span.numel = master.numel();
    pstar::optim::host_adam_step(hyper, grad_scale, span);
  }
};

// The same steps through torch::optim::Adam or AdamW; returns param, exp_avg, exp_avg_sq.
struct TorchResult {
  torch::Tensor param, exp_avg, exp_avg_sq;
};

TorchResult torch_reference(const torch::Tensor& init, const std::vector<torch::Tensor>& grads,
                            const AdamHyper& h, float grad_scale) {
  torch::Tensor p = init.clone().set_requires_grad(true);
  const auto betas = std::make_tuple(static_cast<double>(h.beta1), static_cast<double>(h.beta2));
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (h.decoupled) {
    optimizer = std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{p},
        torch::optim::AdamWOptions(h.lr).betas(betas).eps(h.eps).weight_decay(h.weight_decay));
  } else {
    optimizer = std::make_unique<torch::optim::Adam>(
        std::vector<torch::Tensor>{p},
        torch::optim::AdamOptions(h.lr).betas(betas).eps(h.eps).weight_decay(h.weight_decay));
  }
  for (const auto& g : grads) {
    // g * grad_scale in fp32: the kernel's first operation, one rounding.
    p.mutable_grad() = g.to(torch::kFloat) * grad_scale;
    optimizer->step();
  }
  const auto& state =
      *optimizer->state().at(pstar::compat::optimizer_state_key(optimizer->state(), p));
  TorchResult r;
  r.param = p.detach();
  if (h.decoupled) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(state);
    r.exp_avg = s.exp_avg();
    r.exp_avg_sq = s.exp_avg_sq();
  } else {
    const auto& s = static_cast<const torch::optim::AdamParamState&>(state);
    r.exp_avg = s.exp_avg();
    r.exp_avg_sq = s.exp_avg_sq();
  }
  return r;
}

// Per element |ours - ref| <= rtol * |ref| + floor, with floor = rtol * 0.1 * max|ref| covering
// values that cancel towards zero. Where LibTorch runs its AVX2/AVX-512 kernels the results are
// bit-identical (ExactlyTorchWithVectorKernels); its default kernels may round a*b+c twice where we
// fuse it, and where a sum cancels, such as an L2 gradient g + wd * p near zero at step 1 where the
// update ~ g / (|g| + eps) is sensitive to it, the two then legitimately differ by more: up to 1 in
// 100,000 elements may exceed the bound, but none may exceed 100 times it.
void expect_close(const torch::Tensor& ours, const torch::Tensor& ref, double rtol,
                  const std::string& what) {
  const auto a = ours.to(torch::kDouble);
  const auto b = ref.to(torch::kDouble);
  const double floor = rtol * 0.1 * b.abs().max().item<double>() + 1e-30;
  const auto diff = (a - b).abs();
  const auto bound = b.abs() * rtol + floor;
  const int64_t n_over = diff.gt(bound).sum().item<int64_t>();
  const int64_t n_far = diff.gt(bound * 100).sum().item<int64_t>();
  const double max_rel = (diff / b.abs().clamp_min(floor / rtol)).max().item<double>();
  const std::string detail = what + ": " + std::to_string(n_over) + " of " +
                             std::to_string(a.numel()) + " elements over " + std::to_string(rtol) +
                             " relative, " + std::to_string(n_far) +
                             " over 100 times that; max relative error " + std::to_string(max_rel);
  EXPECT_LE(n_over, a.numel() / 100000) << detail;
  EXPECT_EQ(n_far, 0) << detail;
}

// Bit-identical, except that two NaNs may carry different payloads.
void expect_same_bits_or_nan(const torch::Tensor& a, const torch::Tensor& b,
                             const std::string& what) {
  const auto same = bits_of(a).eq(bits_of(b)).logical_or(a.isnan().logical_and(b.isnan()));
  const int64_t n_diff = a.numel() - same.sum().item<int64_t>();
  EXPECT_EQ(n_diff, 0) << what << ": " << n_diff << " elements differ in their bits";
}

torch::Tensor from_bits(const std::vector<uint32_t>& bits) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(bits.size())}, torch::kInt32);
  std::memcpy(t.data_ptr(), bits.data(), bits.size() * sizeof(uint32_t));
  return t.view(torch::kFloat);
}

AdamHyper test_hyper(bool decoupled, float weight_decay) {
  AdamHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.8f;
  h.beta2 = 0.95f;
  h.eps = 1e-6f;
  h.weight_decay = weight_decay;
  h.decoupled = decoupled;
  return h;
}

// Runs `steps` steps of ours and of LibTorch's on the same data and compares all three tensors.
void check_against_torch(int64_t numel, bool decoupled, float weight_decay, GradType grad_type,
                         ParamOutType out_type, float grad_scale, const std::string& what) {
  torch::manual_seed(static_cast<uint64_t>(numel) + (decoupled ? 7 : 0));
  const torch::Tensor init = torch::randn({numel});
  std::vector<torch::Tensor> grads;  // in the grad dtype; exact in fp32 for the reference
  for (int t = 0; t < 5; ++t) {
    grads.push_back((torch::randn({numel}) * 0.1).to(grad_dtype(grad_type)).contiguous());
  }
  AdamHyper h = test_hyper(decoupled, weight_decay);
  HostState ours(init, out_type);
  for (size_t t = 0; t < grads.size(); ++t) {
    h.step = static_cast<int64_t>(t) + 1;
    ours.step(h, grad_scale, grads[t], grad_type);
  }
  const TorchResult ref = torch_reference(init, grads, h, grad_scale);
  expect_close(ours.master, ref.param, 1e-6, what + " master");
  expect_close(ours.exp_avg, ref.exp_avg, 1e-6, what + " exp_avg");
  expect_close(ours.exp_avg_sq, ref.exp_avg_sq, 1e-6, what + " exp_avg_sq");
  if (out_type != ParamOutType::kNone) {
    // Exactly our master rounded to nearest even, as LibTorch rounds.
    expect_same_bits(ours.out, ours.master.to(out_dtype(out_type)), what + " param_out");
    // And within one low-precision ulp of LibTorch's param rounded (the masters may differ in
    // their last fp32 bit, which can move a rounding tie), with expect_close's absolute floor.
    const auto ref_out = ref.param.to(out_dtype(out_type)).to(torch::kFloat);
    const auto ulp = out_type == ParamOutType::kBF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    const double floor = 1e-7 * ref.param.abs().max().item<double>();
    const auto diff = (ours.out.to(torch::kFloat) - ref_out).abs();
    const int64_t n_far = diff.gt(ref_out.abs() * ulp + floor).sum().item<int64_t>();
    EXPECT_EQ(n_far, 0) << what << " param_out: " << n_far << " elements over one ulp from torch";
    const double mismatch = ours.out.to(torch::kFloat).ne(ref_out).sum().item<double>() / numel;
    EXPECT_LT(mismatch, 1e-3) << what << " param_out: rounding differs from torch too often";
  }
}

TEST(HostAdam, MatchesTorchAdamW) {
  for (int64_t numel : {int64_t{1000003}, int64_t{5}}) {
    const std::string n = "numel " + std::to_string(numel);
    check_against_torch(numel, true, 0.1f, GradType::kF32, ParamOutType::kNone, 0.37f,
                        "AdamW " + n);
    check_against_torch(numel, true, 0.0f, GradType::kF32, ParamOutType::kNone, 1.0f,
                        "AdamW no decay " + n);
  }
}

TEST(HostAdam, MatchesTorchAdamWithL2) {
  for (int64_t numel : {int64_t{1000003}, int64_t{5}}) {
    const std::string n = "numel " + std::to_string(numel);
    check_against_torch(numel, false, 0.05f, GradType::kF32, ParamOutType::kNone, 0.37f,
                        "Adam " + n);
    check_against_torch(numel, false, 0.0f, GradType::kF32, ParamOutType::kNone, 2.0f,
                        "Adam no decay " + n);
  }
}

// LibTorch's AVX2/AVX-512 kernels (used on CPUs with AVX2 unless ATEN_CPU_CAPABILITY=default, in
// builds that have them, as Debian's and PyPI's do) fuse add(alpha) and addcmul into FMAs and
// compute addcdiv as (value * t1) / t2; we do the same (Note [host adam bit identity]).
TEST(HostAdam, ExactlyTorchWithVectorKernels) {
  const char* capability = std::getenv("ATEN_CPU_CAPABILITY");
  if (static_cast<int>(pstar::optim::detail::detected_isa()) < static_cast<int>(Isa::kAvx2) ||
      (capability != nullptr && std::string(capability) == "default")) {
    GTEST_SKIP() << "LibTorch runs its default (non-FMA) CPU kernels here";
  }
  for (bool decoupled : {true, false}) {
    torch::manual_seed(21);
    const int64_t numel = 100003;
    const torch::Tensor init = torch::randn({numel});
    std::vector<torch::Tensor> grads;
    for (int t = 0; t < 4; ++t) grads.push_back(torch::randn({numel}) * 0.1);
    AdamHyper h = test_hyper(decoupled, 0.05f);
    HostState ours(init, ParamOutType::kNone);
    for (size_t t = 0; t < grads.size(); ++t) {
      h.step = static_cast<int64_t>(t) + 1;
      ours.step(h, 0.37f, grads[t], GradType::kF32);
    }
    const TorchResult ref = torch_reference(init, grads, h, 0.37f);
    const std::string what = decoupled ? "AdamW" : "Adam";
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
    // LibTorch 2.x's C++ Adam orders its arithmetic differently from 1.13's (seen against 2.11 on
    // the GPU machines), so there it is held to check_against_torch's bound; bit identity is the
    // contract with 1.13's kernels, which this project is developed against.
    expect_close(ours.master, ref.param, 1e-6, what + " master");
    expect_close(ours.exp_avg, ref.exp_avg, 1e-6, what + " exp_avg");
    expect_close(ours.exp_avg_sq, ref.exp_avg_sq, 1e-6, what + " exp_avg_sq");
#else
    expect_same_bits(ours.master, ref.param, what + " master");
    expect_same_bits(ours.exp_avg, ref.exp_avg, what + " exp_avg");
    expect_same_bits(ours.exp_avg_sq, ref.exp_avg_sq, what + " exp_avg_sq");
#endif
  }
}

TEST(HostAdam, LowPrecisionGradsAndParamCopyMatchTorch) {
  for (GradType g : {GradType::kBF16, GradType::kF16}) {
    for (ParamOutType o : {ParamOutType::kBF16, ParamOutType::kF16}) {
      const std::string what = std::string("grad ") + (g == GradType::kBF16 ? "bf16" : "f16") +
                               " out " + (o == ParamOutType::kBF16 ? "bf16" : "f16");
      check_against_torch(100003, true, 0.1f, g, o, 1.0f / 1024, what);
      check_against_torch(5, false, 0.01f, g, o, 0.5f, what + " (5)");
    }
  }
  check_against_torch(100003, true, 0.1f, GradType::kF32, ParamOutType::kBF16, 0.37f,
                      "grad f32 out bf16");
}

// Values that exercise the conversions: ties, subnormals, overflow edges, zeros, infinities, NaNs.
std::vector<uint32_t> special_bits() {
  return {
      0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000,  // zeros, fp32 subnormals
      0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0xBF808001,  // bf16 ties and neighbours
      0x3F801000, 0x3F803000, 0x3F801001, 0x3F800FFF,              // f16 ties and neighbours
      0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FFFFF, 0xC77FF000,  // around 65504 / 65520
      0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF,              // around FLT_MAX
      0x33000000, 0x33000001, 0x33800000, 0x387FFFFF, 0x38800000,  // f16 subnormal range
      0x337FFFFF, 0xB3400000, 0x38000000, 0x38001000, 0x38003000,  //
      0x7F800000, 0xFF800000,                                      // infinities
      0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFA5A5A5, 0x7FFFFFFF,  // NaNs
  };
}

// With lr = 0 and zero gradients a step leaves master unchanged, so param_out is exactly the
// conversion of whatever master holds.
void convert_through_step(const torch::Tensor& master, ParamOutType out_type, torch::Tensor& out) {
  HostState s(master, out_type);
  AdamHyper h = test_hyper(true, 0.1f);
  h.lr = 0;
  const torch::Tensor grad = torch::zeros_like(master);
  s.step(h, 1.0f, grad, GradType::kF32);
  expect_same_bits_or_nan(s.master, master, "master with lr 0");
  out = s.out;
}

TEST(HostAdam, ParamCopyRoundsLikeTorchOnEveryIsa) {
  std::vector<uint32_t> bits = special_bits();
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) bits.push_back(rng());
  // Dense coverage of the f16 subnormal and overflow ranges.
  for (uint32_t b = 0x33000000; b < 0x38900000; b += 0x3FF) bits.push_back(b);
  for (uint32_t b = 0x477F0000; b < 0x47800400; b += 7) bits.push_back(b | 0x80000000u);
  const torch::Tensor master = from_bits(bits);
  const torch::Tensor finite = master.isnan().logical_not();
  for (Isa isa : available_isas()) {
    ScopedIsa scoped(isa);
    const std::string name = pstar::optim::detail::isa_name(isa);
    for (ParamOutType o : {ParamOutType::kBF16, ParamOutType::kF16}) {
      torch::Tensor out;
      convert_through_step(master, o, out);
      const torch::Tensor ref = master.to(out_dtype(o));
      const std::string what = name + (o == ParamOutType::kBF16 ? " bf16" : " f16");
      expect_same_bits(out.masked_select(finite), ref.masked_select(finite), what);
      // NaN: bf16 0x7FC0 (sign dropped, as c10::BFloat16), f16 sign | 0x7E00 (as c10::Half).
      const auto nan_out = bits_of(out.masked_select(finite.logical_not())).to(torch::kInt32);
      const auto nan_sign = bits_of(master.masked_select(finite.logical_not())).lt(0);
      const auto expected =
          o == ParamOutType::kBF16
              ? torch::full_like(nan_out, 0x7FC0)
              : torch::where(nan_sign, torch::full_like(nan_out, static_cast<int16_t>(0xFE00)),
                             torch::full_like(nan_out, 0x7E00));
      EXPECT_TRUE(torch::equal(nan_out, expected)) << what << " NaN encoding";
    }
  }
}

struct IsaCase {
  GradType grad_type;
  ParamOutType out_type;
  bool decoupled;
  float weight_decay;
};

// One multi-step run on data with special values in both master and grad.
std::vector<torch::Tensor> run_case(const IsaCase& c, int64_t numel) {
  torch::manual_seed(11);
  torch::Tensor init = torch::randn({numel});
  torch::Tensor grad32 = torch::randn({numel}) * 0.1;
  const std::vector<uint32_t> specials = special_bits();
  const std::vector<float> grad_specials = {0.0f,   -0.0f,  1e-40f, -6e-8f,  3e-5f,   60000.0f,
                                            -7e4f,  1e20f,  5e-39f, 65504.f, 1.5e-7f, -2.0f,
                                            1e-30f, 0.125f, 3.0f,   -1e-3f};
  for (size_t k = 0; k < specials.size(); ++k) {
    const int64_t at = static_cast<int64_t>((k * 7919 + static_cast<size_t>(numel) - 1) %
                                            static_cast<size_t>(numel));
    float f;
    std::memcpy(&f, &specials[k], sizeof(f));
    init[at] = f;
    grad32[(at + 3) % numel] = grad_specials[k % grad_specials.size()];
  }
  // A few non-finite gradients (as an overflowed fp16 step would have).
  if (numel > 40) {
    grad32[numel / 2] = std::numeric_limits<float>::infinity();
    grad32[numel / 3] = -std::numeric_limits<float>::infinity();
    grad32[numel / 5] = std::numeric_limits<float>::quiet_NaN();
  }
  const torch::Tensor grad = grad32.to(grad_dtype(c.grad_type)).contiguous();
  HostState s(init, c.out_type);
  AdamHyper h = test_hyper(c.decoupled, c.weight_decay);
  for (int t = 1; t <= 3; ++t) {
    h.step = t;
    s.step(h, 0.37f, grad, c.grad_type);
  }
  return {s.master, s.exp_avg, s.exp_avg_sq, s.out};
}

TEST(HostAdam, EveryIsaIsBitIdenticalToScalar) {
  const std::vector<Isa> isas = available_isas();
  std::vector<IsaCase> cases;
  for (GradType g : {GradType::kF32, GradType::kBF16, GradType::kF16}) {
    for (ParamOutType o : {ParamOutType::kNone, ParamOutType::kBF16, ParamOutType::kF16}) {
      cases.push_back({g, o, true, 0.1f});
      cases.push_back({g, o, false, 0.05f});
      cases.push_back({g, o, true, 0.0f});
    }
  }
  for (int64_t numel : {int64_t{1}, int64_t{5}, int64_t{17}, int64_t{31}, int64_t{100003}}) {
    for (const IsaCase& c : cases) {
      std::vector<torch::Tensor> reference;
      {
        ScopedIsa scoped(Isa::kScalar);
        reference = run_case(c, numel);
      }
      for (Isa isa : isas) {
        if (isa == Isa::kScalar) continue;
        ScopedIsa scoped(isa);
        const std::vector<torch::Tensor> got = run_case(c, numel);
        const std::string what =
            std::string(pstar::optim::detail::isa_name(isa)) + " numel " + std::to_string(numel) +
            " grad " + std::to_string(static_cast<int>(c.grad_type)) + " out " +
            std::to_string(static_cast<int>(c.out_type)) + " decoupled " +
            std::to_string(c.decoupled) + " wd " + std::to_string(c.weight_decay);
        expect_same_bits_or_nan(got[0], reference[0], what + " master");
        expect_same_bits_or_nan(got[1], reference[1], what + " exp_avg");
        expect_same_bits_or_nan(got[2], reference[2], what + " exp_avg_sq");
        if (c.out_type != ParamOutType::kNone) {
          expect_same_bits(got[3], reference[3], what + " param_out");
        }
      }
    }
  }
}

TEST(HostAdam, ThreadCountDoesNotChangeResults) {
  const IsaCase c{GradType::kBF16, ParamOutType::kBF16, true, 0.1f};
  std::vector<torch::Tensor> one, two;
  {
    ScopedOmpThreads threads(1);
    one = run_case(c, 300007);
  }
  {
    ScopedOmpThreads threads(2);
    two = run_case(c, 300007);
  }
  for (size_t k = 0; k < one.size(); ++k) {
    expect_same_bits_or_nan(two[k], one[k], "tensor " + std::to_string(k));
  }
}

double reference_sq_sum(const torch::Tensor& grad) {
  return grad.to(torch::kDouble).square().sum().item<double>();
}

double sq_sum(const torch::Tensor& grad, GradType type) {
  return pstar::optim::grad_sq_sum(grad.data_ptr(), type, grad.numel());
}

TEST(HostAdam, GradSqSumMatchesDoubleReference) {
  torch::manual_seed(5);
  for (int64_t numel : {int64_t{1000003}, int64_t{65536}, int64_t{5}, int64_t{1}}) {
    const torch::Tensor g32 = torch::randn({numel}) * 3;
    for (GradType type : {GradType::kF32, GradType::kBF16, GradType::kF16}) {
      const torch::Tensor g = g32.to(grad_dtype(type)).contiguous();
      const double ref = reference_sq_sum(g);
      EXPECT_NEAR(sq_sum(g, type), ref, 1e-12 * ref)
          << "numel " << numel << " type " << static_cast<int>(type);
    }
  }
  EXPECT_EQ(pstar::optim::grad_sq_sum(nullptr, GradType::kF32, 0), 0.0);
}

TEST(HostAdam, GradSqSumDetectsNonFinite) {
  for (GradType type : {GradType::kF32, GradType::kBF16, GradType::kF16}) {
    const std::string what = "type " + std::to_string(static_cast<int>(type));
    torch::Tensor g = torch::randn({200003});
    g[150001] = -std::numeric_limits<float>::infinity();
    const torch::Tensor with_inf = g.to(grad_dtype(type)).contiguous();
    const double inf_sum = sq_sum(with_inf, type);
    EXPECT_TRUE(std::isinf(inf_sum) && inf_sum > 0) << what << ": " << inf_sum;
    g[7] = std::numeric_limits<float>::quiet_NaN();
    const torch::Tensor with_nan = g.to(grad_dtype(type)).contiguous();
    EXPECT_TRUE(std::isnan(sq_sum(with_nan, type))) << what;
    // An fp16 grad that overflowed in the backward pass is +-inf in the buffer already; a large
    // finite fp32 value must stay finite (squares cannot overflow a double).
    torch::Tensor big = torch::full({33}, std::numeric_limits<float>::max());
    EXPECT_TRUE(std::isfinite(sq_sum(big, GradType::kF32)));
  }
}

TEST(HostAdam, GradSqSumIsDeterministicAcrossThreadsAndIsas) {
  torch::manual_seed(9);
  const torch::Tensor g = torch::randn({1000003}) * torch::randn({1000003}).exp();
  const int64_t reference_bits = [&] {
    ScopedIsa scoped(Isa::kScalar);
    ScopedOmpThreads threads(1);
    const double s = sq_sum(g, GradType::kF32);
    int64_t b;
    std::memcpy(&b, &s, sizeof(b));
    return b;
  }();
  for (Isa isa : available_isas()) {
    ScopedIsa scoped(isa);
    for (int threads : {1, 2, 3}) {
      ScopedOmpThreads set_threads(threads);
      const double s = sq_sum(g, GradType::kF32);
      int64_t b;
      std::memcpy(&b, &s, sizeof(b));
      EXPECT_EQ(b, reference_bits)
          << pstar::optim::detail::isa_name(isa) << " with " << threads << " threads: " << s;
    }
  }
}

TEST(HostAdam, IsaSelection) {
  using pstar::optim::detail::resolve_isa;
  EXPECT_EQ(resolve_isa(nullptr, Isa::kAvx512), Isa::kAvx512);
  EXPECT_EQ(resolve_isa("", Isa::kAvx2), Isa::kAvx2);
  EXPECT_EQ(resolve_isa("scalar", Isa::kAvx512), Isa::kScalar);
  EXPECT_EQ(resolve_isa("avx2", Isa::kAvx512), Isa::kAvx2);
  EXPECT_EQ(resolve_isa("avx512", Isa::kAvx2), Isa::kAvx2);  // never above the CPU
  try {
    resolve_isa("sse9", Isa::kAvx2);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const pstar::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PSTAR_ADAM_ISA='sse9'"), std::string::npos) << e.what();
  }
  {
    ScopedIsa scoped(Isa::kScalar);
    EXPECT_STREQ(pstar::optim::host_adam_isa(), "scalar");
  }
  const std::string isa = pstar::optim::host_adam_isa();
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512") << isa;
  std::printf("host Adam ISA: %s (detected %s)\n", isa.c_str(),
              pstar::optim::detail::isa_name(pstar::optim::detail::detected_isa()));
}

TEST(HostAdam, RejectsInvalidArguments) {
  float master[4] = {}, m[4] = {}, v[4] = {}, g[4] = {};
  AdamSpan span;
  span.master = master;
  span.exp_avg = m;
  span.exp_avg_sq = v;
  span.grad = g;
  span.numel = 4;
  const auto expect_config_error = [&](const AdamHyper& h, const AdamSpan& s, float scale,
                                       const std::string& substring) {
    try {
      pstar::optim::host_adam_step(h, scale, s);
      ADD_FAILURE() << "expected ConfigError containing '" << substring << "'";
    } catch (const pstar::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
    }
  };
  AdamHyper h;
  h.lr = -1;
  expect_config_error(h, span, 1, "learning rate");
  h = AdamHyper();
  h.beta2 = 1;
  expect_config_error(h, span, 1, "beta parameter at index 1");
  h = AdamHyper();
  h.step = 0;
  expect_config_error(h, span, 1, "step");
  expect_config_error(AdamHyper(), span, std::numeric_limits<float>::infinity(), "grad_scale");
  AdamSpan no_out = span;
  no_out.param_out_type = ParamOutType::kBF16;
  expect_config_error(AdamHyper(), no_out, 1, "param_out is null");
  AdamSpan no_grad = span;
  no_grad.grad = nullptr;
  expect_config_error(AdamHyper(), no_grad, 1, "must not be null");
  // An empty span is a no-op, null pointers included.
  pstar::optim::host_adam_step(AdamHyper(), 1, AdamSpan());
}

// The chunk engine's param/grad reuse passes the same buffer as grad and param_out: each element's
// gradient is read before its new value is written over it.
TEST(HostAdam, GradMayAliasTheParamCopy) {
  const int64_t n = 100003;
  for (Isa isa : available_isas()) {
    ScopedIsa scoped(isa);
    for (auto type : {torch::kBFloat16, torch::kFloat16}) {
      torch::manual_seed(9);
      auto master = torch::randn({n});
      auto grad = torch::randn({n}).to(type);
      auto m1 = torch::zeros({n}), v1 = torch::zeros({n}), m2 = m1.clone(), v2 = v1.clone();
      auto master2 = master.clone();
      auto out = torch::empty({n}, type);
      auto shared = grad.clone();  // holds the gradient, then the new parameters
      AdamHyper hyper;
      hyper.lr = 0.01f;
      hyper.weight_decay = 0.1f;
      const GradType g = type == torch::kBFloat16 ? GradType::kBF16 : GradType::kF16;
      const ParamOutType o = type == torch::kBFloat16 ? ParamOutType::kBF16 : ParamOutType::kF16;
      host_adam_step(hyper, 0.5f,
                     AdamSpan{master.data_ptr<float>(), m1.data_ptr<float>(), v1.data_ptr<float>(),
                              grad.data_ptr(), g, out.data_ptr(), o, n});
      host_adam_step(hyper, 0.5f,
                     AdamSpan{master2.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(),
                              shared.data_ptr(), g, shared.data_ptr(), o, n});
      EXPECT_TRUE(torch::equal(shared, out)) << pstar::optim::detail::isa_name(isa);
      EXPECT_TRUE(torch::equal(master2, master));
    }
  }
}

}  // namespace
