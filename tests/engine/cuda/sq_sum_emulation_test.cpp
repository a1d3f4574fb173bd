// The CUDA gradient sum of squares' arithmetic, run on the CPU: sq_sum_element.h compiled for the
// host (with -ffp-contract=off, as host Adam's files are) against optim::grad_sq_sum, bit for bit,
// with every host ISA. This checks the blocks, lanes and order on any machine; that the device's
// __dadd_rn rounds as the host's add does is IEEE 754's promise, checked on a GPU by
// sq_sum_kernel_test.cpp (Note [cuda grad sq sum order]). Also the argument checks of
// cuda::grad_sq_sum, which throw before touching the device.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "pstar/base/error.h"
#include "pstar/cuda/sq_sum.h"
#include "pstar/optim/host_adam.h"
#include "sq_sum_element.h"

namespace pstar::cuda::test {
namespace {

using optim::GradType;
using optim::detail::Isa;

template <GradType G>
double emulate(const void* grad, int64_t numel) {
  const int64_t blocks = cuda::detail::sq_sum_block_count(numel);
  std::vector<double> block_sums(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    // What the 16 threads of a half-warp compute for block b.
    double lanes[cuda::detail::kSqSumLanes];
    for (int j = 0; j < cuda::detail::kSqSumLanes; ++j) {
      lanes[j] = cuda::detail::sq_sum_lane<G>(grad, numel, b, j);
    }
    block_sums[static_cast<size_t>(b)] = cuda::detail::sq_sum_lanes(lanes);
  }
  return cuda::detail::sq_sum_blocks(block_sums.data(), blocks);
}

// What cuda::grad_sq_sum computes, on the CPU.
double emulated_sq_sum(const void* grad, GradType type, int64_t numel) {
  if (numel == 0) return 0.0;
  switch (type) {
    case GradType::kF32:
      return emulate<GradType::kF32>(grad, numel);
    case GradType::kBF16:
      return emulate<GradType::kBF16>(grad, numel);
    case GradType::kF16:
      return emulate<GradType::kF16>(grad, numel);
  }
  return 0.0;
}

class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) { optim::detail::set_isa_for_testing(&isa); }
  ~ScopedIsa() { optim::detail::set_isa_for_testing(nullptr); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
};

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(optim::detail::detected_isa())) {
      isas.push_back(isa);
    }
  }
  return isas;
}

class SqSumEmulationTest : public ::testing::TestWithParam<GradType> {};

TEST_P(SqSumEmulationTest, MatchesHostBitForBit) {
  const GradType t = GetParam();
  for (SqSumInput input : all_sq_sum_inputs()) {
    for (int64_t n : sq_sum_sizes()) {
      SCOPED_TRACE(std::string(name(input)) + ", numel " + std::to_string(n));
      std::mt19937 rng(static_cast<uint32_t>(n * 5 + static_cast<int64_t>(input)));
      const std::vector<uint8_t> grad = sq_sum_grad(t, n, input, rng);
      const double emulated = emulated_sq_sum(grad.data(), t, n);
      for (Isa isa : available_isas()) {
        SCOPED_TRACE(optim::detail::isa_name(isa));
        const ScopedIsa scoped(isa);
        const double host = optim::grad_sq_sum(grad.data(), t, n);
        EXPECT_TRUE(same_sq_sum(host, emulated));
        // The inputs are what they claim to be.
        if (n > 0 && input == SqSumInput::kInf) {
          EXPECT_EQ(host, INFINITY);
        }
        if (n > 0 && (input == SqSumInput::kNaN || input == SqSumInput::kInfAndNaN)) {
          EXPECT_TRUE(std::isnan(host));
        }
        if (input == SqSumInput::kRandom || input == SqSumInput::kExtremes) {
          EXPECT_TRUE(std::isfinite(host));
        }
      }
    }
  }
}

// Every finite 16-bit pattern, each conversion once (fp16 subnormals, bf16 denormals included).
TEST(SqSumEmulationConversions, EveryFinite16BitPatternMatchesHost) {
  for (GradType t : {GradType::kBF16, GradType::kF16}) {
    SCOPED_TRACE(name(t));
    const uint32_t exponent_mask = t == GradType::kBF16 ? 0x7F80u : 0x7C00u;
    std::vector<uint16_t> grad;
    for (uint32_t h = 0; h < 65536; ++h) {
      if ((h & exponent_mask) != exponent_mask) grad.push_back(static_cast<uint16_t>(h));
    }
    const auto n = static_cast<int64_t>(grad.size());
    EXPECT_TRUE(
        same_sq_sum(optim::grad_sq_sum(grad.data(), t, n), emulated_sq_sum(grad.data(), t, n)));
  }
}

INSTANTIATE_TEST_SUITE_P(AllGradTypes, SqSumEmulationTest,
                         ::testing::Values(GradType::kF32, GradType::kBF16, GradType::kF16),
                         [](const ::testing::TestParamInfo<GradType>& info) {
                           return std::string(name(info.param));
                         });

// The comparison above can fail: with these inputs a plain sequential sum differs from the
// host's, so the order is what is being checked.
TEST(SqSumEmulationOrder, ASequentialSumDiffers) {
  std::mt19937 rng(5);
  const int64_t n = 300001;
  const std::vector<uint8_t> grad = sq_sum_grad(GradType::kF32, n, SqSumInput::kRandom, rng);
  const auto* x = reinterpret_cast<const float*>(grad.data());
  double sequential = 0.0;
  for (int64_t i = 0; i < n; ++i) sequential += static_cast<double>(x[i]) * x[i];
  EXPECT_FALSE(same_sq_sum(optim::grad_sq_sum(grad.data(), GradType::kF32, n), sequential));
}

// These throw before any CUDA call, so they run without a device.
TEST(CudaSqSumArgs, RejectsBadArgumentsWithoutTouchingTheDevice) {
  const auto f32 = GradType::kF32;
  EXPECT_EQ(grad_sq_sum(nullptr, f32, 0, nullptr), 0.0);
  EXPECT_EQ(grad_sq_sum(nullptr, GradType::kBF16, 0, nullptr), 0.0);
  try {
    grad_sq_sum(nullptr, f32, -1, nullptr);
    ADD_FAILURE() << "numel -1 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("numel must be >= 0, got -1"), std::string::npos)
        << e.what();
  }
  try {
    grad_sq_sum(nullptr, static_cast<GradType>(7), 4, nullptr);
    ADD_FAILURE() << "grad_type 7 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid grad_type 7"), std::string::npos) << e.what();
  }
  try {
    grad_sq_sum(nullptr, GradType::kBF16, 4, nullptr);
    ADD_FAILURE() << "null grad accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("grad (bf16) must not be null"), std::string::npos)
        << e.what();
  }
  // Never dereferenced: the check comes first.
  const void* odd = reinterpret_cast<const void*>(uintptr_t{0x1002});
  try {
    grad_sq_sum(odd, f32, 4, nullptr);
    ADD_FAILURE() << "a misaligned fp32 grad accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not aligned to its element size (4 bytes)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      grad_sq_sum(reinterpret_cast<const void*>(uintptr_t{0x1001}), GradType::kF16, 4, nullptr),
      ConfigError);
}

}  // namespace
}  // namespace pstar::cuda::test
