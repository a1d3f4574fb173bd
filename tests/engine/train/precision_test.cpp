// The bf16 probe and the precision choice (Note [bf16 on CPUs]): the rule by hand, the probe's
// measurements against their definitions, and "auto" with LibTorch's oneDNN kernels on and off.
#include "pstar/train/precision.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/core/torch_compat.h"
#include "pstar/formats/config.h"
#include "pstar/train/run_facts.h"

namespace pstar::train {
namespace {

Bf16Probe probe_of(double bf16, double fp32, double error) {
  Bf16Probe p;
  p.bf16_gflops = bf16;
  p.fp32_gflops = fp32;
  p.bf16_relative_error = error;
  return p;
}

// Restores LibTorch's oneDNN switch when a test is done with it.
class ScopedOneDnn {
 public:
  explicit ScopedOneDnn(bool enabled) : before_(at::globalContext().userEnabledMkldnn()) {
    at::globalContext().setUserEnabledMkldnn(enabled);
  }
  ~ScopedOneDnn() { at::globalContext().setUserEnabledMkldnn(before_); }

 private:
  bool before_;
};

TEST(Bf16Probe, RuleNeedsSpeedAndFp32Accumulation) {
  EXPECT_TRUE(probe_of(180, 90, 1.7e-3).fast());    // AVX-512 BF16 through oneDNN
  EXPECT_TRUE(probe_of(100, 100, 1e-2).fast());     // both bounds inclusive
  EXPECT_FALSE(probe_of(4.8, 36, 3.7e-2).fast());   // AVX2 fallback GEMM: slow and inexact
  EXPECT_FALSE(probe_of(99, 100, 1.7e-3).fast());   // slower than fp32
  EXPECT_FALSE(probe_of(400, 100, 1.1e-2).fast());  // fast but accumulating in bf16
  EXPECT_DOUBLE_EQ(probe_of(180, 90, 0).speedup(), 2.0);
  Bf16Probe none;
  none.supported = false;
  none.bf16_gflops = 1000;
  none.fp32_gflops = 1;
  EXPECT_FALSE(none.fast());
  EXPECT_EQ(probe_of(430.1, 107.9, 1.68e-3).describe(),
            "bf16 matmul 430.1 GFLOP/s vs fp32 107.9 GFLOP/s (3.99x), accumulation error 1.7e-03");
}

TEST(Bf16Probe, MeasuresBothRatesAndTheKernelsError) {
  const Bf16Probe p = measure_bf16(c10::Device(c10::kCPU));
  ASSERT_TRUE(p.supported) << p.unsupported_reason;
  EXPECT_GT(p.fp32_gflops, 0.1);
  EXPECT_GT(p.bf16_gflops, 0.01);
  // A bf16 result rounds to 8 significant bits: even exact accumulation leaves ~1e-3, and no
  // working kernel is off by more than a few percent.
  EXPECT_GT(p.bf16_relative_error, 1e-4);
  EXPECT_LT(p.bf16_relative_error, 0.2);
}

TEST(Bf16Probe, LeavesTheProcessRandomStreamAlone) {
  torch::manual_seed(7);
  const auto expected = torch::randn({4});
  torch::manual_seed(7);
  (void)measure_bf16(c10::Device(c10::kCPU));
  EXPECT_TRUE(torch::equal(torch::randn({4}), expected));
}

// LibTorch 1.13's fallback GEMM (oneDNN off, or a CPU without AVX-512) is the slow, bf16-
// accumulating kernel of the Note; "auto" must refuse it on any CPU.
TEST(Bf16Probe, FallbackKernelsAreSlowAndInexact) {
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  GTEST_SKIP() << "the Note's figures are for LibTorch 1.13's fallback GEMM; LibTorch "
               << compat::torch_version() << " has other CPU bf16 kernels";
#else
  ScopedOneDnn off(false);
  const Bf16Probe p = measure_bf16(c10::Device(c10::kCPU));
  EXPECT_LT(p.speedup(), 0.5) << p.describe();
  EXPECT_GT(p.bf16_relative_error, Bf16Probe::kMaxRelativeError) << p.describe();
  EXPECT_FALSE(p.fast()) << p.describe();
#endif
}

// With oneDNN on an AVX-512 CPU, bf16 matmuls accumulate in fp32 (their speed depends on whether
// the CPU has AVX-512 BF16, so it is not asserted).
TEST(Bf16Probe, OneDnnAccumulatesInFp32OnAvx512) {
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512dq"))
    GTEST_SKIP() << "this CPU has no AVX-512 BW/VL/DQ, so LibTorch uses no oneDNN bf16 matmul";
  ScopedOneDnn on(true);
  const Bf16Probe p = measure_bf16(c10::Device(c10::kCPU));
  EXPECT_LE(p.bf16_relative_error, Bf16Probe::kMaxRelativeError) << p.describe();
}

TEST(PlanRunPrecision, AutoFollowsTheProbe) {
  config::TrainConfig c;
  c.bf16.enabled = config::OnOffAuto::kAuto;
  const plan::RunPlan run = plan_run(c, "cpu", nullptr);
  const bool fast = bf16_probe(c10::Device(c10::kCPU)).fast();
  EXPECT_EQ(run.config.bf16.enabled, config::on_off(fast));
  EXPECT_EQ(run.precision, fast ? plan::Precision::kBf16 : plan::Precision::kFp32);
}

TEST(PlanRunPrecision, AutoChoosesFp32OnFallbackKernels) {
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  GTEST_SKIP() << "see FallbackKernelsAreSlowAndInexact";
#else
  ScopedOneDnn off(false);
  config::TrainConfig c;
  c.bf16.enabled = config::OnOffAuto::kAuto;
  const plan::RunPlan run = plan_run(c, "cpu", nullptr);
  EXPECT_EQ(run.config.bf16.enabled, config::OnOffAuto::kOff);
  EXPECT_EQ(run.precision, plan::Precision::kFp32);
#endif
}

TEST(PlanRunPrecision, ExplicitChoicesAreKept) {
  ScopedOneDnn off(false);  // bf16 is slow here, and still kept when asked for
  config::TrainConfig c;
  c.bf16.enabled = config::OnOffAuto::kOn;
  const plan::RunPlan bf16 = plan_run(c, "cpu", nullptr);
  EXPECT_EQ(bf16.config.bf16.enabled, config::OnOffAuto::kOn);
  EXPECT_EQ(bf16.precision, plan::Precision::kBf16);
  c.bf16.enabled = config::OnOffAuto::kOff;
  const plan::RunPlan fp32 = plan_run(c, "cpu", nullptr);
  EXPECT_EQ(fp32.config.bf16.enabled, config::OnOffAuto::kOff);
  EXPECT_EQ(fp32.precision, plan::Precision::kFp32);
}

}  // namespace
}  // namespace pstar::train
