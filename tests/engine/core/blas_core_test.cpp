// Note [openblas core]: which OpenBLAS kernels the process's fp32 matmuls run on.
#include "pstar/core/blas_core.h"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace pstar::core {
namespace {

constexpr CpuVectors kSse3{false, false};
constexpr CpuVectors kAvx2{true, false};
constexpr CpuVectors kAvx512{true, true};

TEST(ChooseBlasCore, PrescottOnACpuWithBetterUnitsTakesTheirKernels) {
  EXPECT_EQ(choose_blas_core("Prescott", nullptr, nullptr, kAvx512).core, "SkylakeX");
  EXPECT_EQ(choose_blas_core("Prescott", nullptr, nullptr, kAvx2).core, "Haswell");
  // OpenBLAS compares names without case.
  EXPECT_EQ(choose_blas_core("PRESCOTT", nullptr, nullptr, kAvx2).core, "Haswell");
}

TEST(ChooseBlasCore, TheForcedAvx2PathsTakeHaswell) {
  EXPECT_EQ(choose_blas_core("Prescott", nullptr, "avx2", kAvx512).core, "Haswell");
  EXPECT_EQ(choose_blas_core("Prescott", nullptr, "avx512", kAvx512).core, "SkylakeX");
}

TEST(ChooseBlasCore, LeavesAloneWhatItShould) {
  // The user's choice, whatever it is.
  const BlasCoreChoice user = choose_blas_core("Prescott", "Prescott", nullptr, kAvx512);
  EXPECT_TRUE(user.core.empty());
  EXPECT_NE(user.why.find("OPENBLAS_CORETYPE=Prescott"), std::string::npos) << user.why;
  // A CPU OpenBLAS recognised.
  EXPECT_TRUE(choose_blas_core("SkylakeX", nullptr, nullptr, kAvx512).core.empty());
  EXPECT_TRUE(choose_blas_core("Haswell", nullptr, "avx2", kAvx512).core.empty());
  // A CPU with nothing better than SSE3.
  const BlasCoreChoice old = choose_blas_core("Prescott", nullptr, nullptr, kSse3);
  EXPECT_TRUE(old.core.empty());
  EXPECT_NE(old.why.find("no AVX2"), std::string::npos) << old.why;
}

// This test process links blas_core.cpp, so its switch ran before main: whatever OpenBLAS chose at
// load, the kernels running now are the report's, and its children inherit the choice.
TEST(ConfigureBlasCore, TheProcessRunsTheKernelsTheReportNames) {
  const std::string in_use = blas_core_in_use();
  if (in_use.empty()) GTEST_SKIP() << "this process's BLAS is not OpenBLAS";
  const BlasCoreReport& report = configure_blas_core();
  EXPECT_EQ(report.in_use, in_use);
  const char* capability = std::getenv("ATEN_CPU_CAPABILITY");
  const std::string wanted =
      choose_blas_core(report.detected,
                       report.user_coretype.empty() ? nullptr : report.user_coretype.c_str(),
                       capability, cpu_vectors())
          .core;
  if (wanted.empty()) {
    EXPECT_FALSE(report.switched);
    EXPECT_EQ(in_use, report.detected);
    return;
  }
  EXPECT_TRUE(report.switched) << report.line;
  EXPECT_EQ(in_use, wanted) << report.line;
  const char* inherited = std::getenv("OPENBLAS_CORETYPE");
  ASSERT_NE(inherited, nullptr);
  EXPECT_EQ(std::string(inherited), wanted);
  EXPECT_NE(report.line.find("switched it to its " + wanted), std::string::npos) << report.line;
}

// Whichever kernels run, fp32 matmuls agree with float64 ones to fp32's accuracy over k = 1000
// (blocked sums: about sqrt(k) roundings of 6e-8).
TEST(ConfigureBlasCore, Fp32MatmulsMatchFloat64) {
  torch::manual_seed(7);
  const torch::Tensor a = torch::randn({257, 1000}), b = torch::randn({1000, 129});
  const torch::Tensor got = torch::mm(a, b).to(torch::kFloat64);
  const torch::Tensor want = torch::mm(a.to(torch::kFloat64), b.to(torch::kFloat64));
  const double scale = want.abs().max().item<double>();
  EXPECT_LT((got - want).abs().max().item<double>() / scale, 1e-5)
      << "kernels: " << blas_core_in_use();
}

}  // namespace
}  // namespace pstar::core
