// Shared by the CUDA tests: the skip rule for GPU tests, random Adam and sum-of-squares inputs, and
// comparisons with Note [cuda adam bit identity]'s rule for NaNs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/cuda/device.h"
#include "pstar/optim/host_adam.h"

// For gtest's messages ("where GetParam() = F32"), found by argument-dependent lookup.
namespace pstar::optim {
inline void PrintTo(GradType t, std::ostream* os) {
  *os << (t == GradType::kF32 ? "F32" : t == GradType::kBF16 ? "BF16" : "F16");
}
}  // namespace pstar::optim

namespace pstar::cuda::test {

// Every test of a GPU test executable derives from this: without a device it is skipped with the
// reason, so that ctest reports it as skipped, never as passed.
class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device: " << no_device_reason();
  }
};

template <typename Param>
class CudaDeviceParamTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device: " << no_device_reason();
  }
};

enum class Decay { kNone, kL2, kDecoupled };

struct AdamCase {
  optim::GradType grad;
  optim::ParamOutType out;
  Decay decay;
};

inline const char* name(optim::GradType t) {
  switch (t) {
    case optim::GradType::kF32:
      return "F32";
    case optim::GradType::kBF16:
      return "BF16";
    case optim::GradType::kF16:
      return "F16";
  }
  return "?";
}

inline const char* name(optim::ParamOutType t) {
  switch (t) {
    case optim::ParamOutType::kNone:
      return "None";
    case optim::ParamOutType::kBF16:
      return "BF16";
    case optim::ParamOutType::kF16:
      return "F16";
  }
  return "?";
}

inline const char* name(Decay d) {
  switch (d) {
    case Decay::kNone:
      return "NoDecay";
    case Decay::kL2:
      return "L2";
    case Decay::kDecoupled:
      return "Decoupled";
  }
  return "?";
}

// Every combination of gradient dtype, parameter copy and weight decay.
inline std::vector<AdamCase> all_adam_cases() {
  std::vector<AdamCase> cases;
  for (auto g : {optim::GradType::kF32, optim::GradType::kBF16, optim::GradType::kF16}) {
    for (auto o :
         {optim::ParamOutType::kNone, optim::ParamOutType::kBF16, optim::ParamOutType::kF16}) {
      for (auto d : {Decay::kNone, Decay::kL2, Decay::kDecoupled}) cases.push_back({g, o, d});
    }
  }
  return cases;
}

// For gtest's messages ("where GetParam() = ...").
inline void PrintTo(const AdamCase& c, std::ostream* os) {
  *os << "grad " << name(c.grad) << ", out " << name(c.out) << ", " << name(c.decay);
}

inline std::string case_name(const ::testing::TestParamInfo<AdamCase>& info) {
  return std::string("Grad") + name(info.param.grad) + "_Out" + name(info.param.out) + "_" +
         name(info.param.decay);
}

inline optim::AdamHyper hyper_for(Decay decay, int64_t step) {
  optim::AdamHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = 1e-8f;
  h.weight_decay = decay == Decay::kNone ? 0.0f : 0.05f;
  h.decoupled = decay != Decay::kL2;
  h.step = step;
  return h;
}

// The hyper.step values of successive calls: early steps, where bias correction matters most, and a
// late one.
inline std::vector<int64_t> step_sequence() { return {1, 2, 3, 10, 1000}; }

// A clip coefficient over a loss scale, as the engine passes it.
constexpr float kGradMultiplier = 0.73f / 1024.0f;

inline size_t grad_elem_bytes(optim::GradType t) { return t == optim::GradType::kF32 ? 4 : 2; }

// Master, moments and gradients of one span, with edge values mixed in.
struct AdamInputs {
  std::vector<float> master, exp_avg, exp_avg_sq;
};

inline AdamInputs random_state(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AdamInputs in;
  in.master.resize(static_cast<size_t>(n));
  in.exp_avg.resize(static_cast<size_t>(n));
  in.exp_avg_sq.resize(static_cast<size_t>(n));
  // Values whose 16-bit copies are edge cases: fp16 overflow and its threshold, fp16 subnormals
  // and the tie below the smallest one, fp32 denormals, signed zeros, bf16 ties.
  const float edges[] = {0.0f,  -0.0f,    65504.0f, 65519.0f, 65520.0f,    -70000.0f,   6e-8f,
                         3e-8f, 2.98e-8f, 1e-40f,   -1e-42f,  1.00390625f, 1.01171875f, 1e30f};
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    in.master[k] = i % 97 < 14 ? edges[i % 97] : normal(rng);
    in.exp_avg[k] = 0.01f * normal(rng);
    in.exp_avg_sq[k] = 1e-4f * std::fabs(normal(rng));
  }
  return in;
}

// n gradients of type t as raw bytes: fp32 from a normal distribution with some denormals; bf16 and
// fp16 as random finite bit patterns (every fp16 exponent, subnormals included; bf16 exponents
// from 2^-30 to 2^13).
inline std::vector<uint8_t> random_grad(optim::GradType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * grad_elem_bytes(t));
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  if (t == optim::GradType::kF32) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float v = i % 31 == 0 ? 1e-39f * normal(rng) : 10.0f * normal(rng);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t r = bits(rng);
      uint16_t h;
      if (t == optim::GradType::kBF16) {
        const uint32_t exponent = 97 + r % 44;  // 2^-30 .. 2^13
        h = static_cast<uint16_t>(((r >> 8) & 0x8000u) | (exponent << 7) | ((r >> 16) & 0x7Fu));
      } else {
        const uint32_t exponent = r % 31;  // 0 (zero, subnormals) .. 30: finite
        h = static_cast<uint16_t>(((r >> 8) & 0x8000u) | (exponent << 10) | ((r >> 16) & 0x3FFu));
      }
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The number of elements that differ (a few reported as failures). fp32: the same bits, or both
// NaN (payloads may differ: Note [cuda adam bit identity]).
inline int64_t count_f32_mismatches(const std::vector<float>& expected, const float* actual,
                                    const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const bool same = bits_of(expected[i]) == bits_of(actual[i]) ||
                      (std::isnan(expected[i]) && std::isnan(actual[i]));
    if (!same && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: expected " << expected[i] << " (0x" << std::hex
                    << bits_of(expected[i]) << "), got " << actual[i] << " (0x"
                    << bits_of(actual[i]) << std::dec << ")";
    }
  }
  return bad;
}

// 16-bit parameter copies: the same bits; for fp16 a NaN may differ in sign (bf16 NaNs are all
// 0x7FC0 on both sides).
inline int64_t count_u16_mismatches(const std::vector<uint16_t>& expected, const uint16_t* actual,
                                    optim::ParamOutType type, const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    bool same = expected[i] == actual[i];
    if (!same && type == optim::ParamOutType::kF16) {
      same = (expected[i] & 0x7FFFu) == 0x7E00u && (actual[i] & 0x7FFFu) == 0x7E00u;
    }
    if (!same && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: expected 0x" << std::hex << expected[i] << ", got 0x"
                    << actual[i] << std::dec;
    }
  }
  return bad;
}

// The gradient sizes of the sum-of-squares tests: empty, within one lane row, around a row of 16
// lanes, around one block of 65536 elements, several blocks with a partial last one.
inline std::vector<int64_t> sq_sum_sizes() {
  return {0, 1, 15, 16, 17, 65535, 65536, 65537, 3 * 65536 + 5, 300001};
}

// The inputs of a sum of squares: random_grad's values alone (so that the order of the adds shows
// in the result), with each type's extremes mixed in (largest finite, which then dominates the sum,
// smallest normal, denormals, signed zeros), and with non-finite values besides.
enum class SqSumInput { kRandom, kExtremes, kInf, kNaN, kInfAndNaN };

inline std::vector<SqSumInput> all_sq_sum_inputs() {
  return {SqSumInput::kRandom, SqSumInput::kExtremes, SqSumInput::kInf, SqSumInput::kNaN,
          SqSumInput::kInfAndNaN};
}

inline const char* name(SqSumInput in) {
  switch (in) {
    case SqSumInput::kRandom:
      return "random";
    case SqSumInput::kExtremes:
      return "extremes";
    case SqSumInput::kInf:
      return "inf";
    case SqSumInput::kNaN:
      return "nan";
    case SqSumInput::kInfAndNaN:
      return "inf and nan";
  }
  return "?";
}

// n gradients of type t as raw bytes, as `input` asks. Non-finite values: +inf at n / 3 and -inf
// every 4099 elements; a NaN at n / 2 and others (negative, signaling) every 8191.
inline std::vector<uint8_t> sq_sum_grad(optim::GradType t, int64_t n, SqSumInput input,
                                        std::mt19937& rng) {
  std::vector<uint8_t> bytes = random_grad(t, n, rng);
  if (input == SqSumInput::kRandom || n == 0) return bytes;
  const bool f32 = t == optim::GradType::kF32;
  auto put = [&](int64_t i, uint32_t bits) {
    if (f32) {
      std::memcpy(bytes.data() + 4 * i, &bits, 4);
    } else {
      const auto h = static_cast<uint16_t>(bits);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  };
  std::vector<uint32_t> extremes;
  if (f32) {
    extremes = {0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u, 0x00000001u, 0x80000001u,
                0x007FFFFFu, 0x80000000u, 0x00000000u, 0x5F800000u, 0x1F800000u};
  } else if (t == optim::GradType::kBF16) {
    extremes = {0x7F7Fu, 0xFF7Fu, 0x0080u, 0x0001u, 0x8001u, 0x007Fu, 0x8000u, 0x0000u};
  } else {
    extremes = {0x7BFFu, 0xFBFFu, 0x0400u, 0x0001u, 0x83FFu, 0x03FFu, 0x8000u, 0x0000u};
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i % 101 < static_cast<int64_t>(extremes.size())) put(i, extremes[i % 101]);
  }
  const uint32_t pos_inf = f32 ? 0x7F800000u : t == optim::GradType::kBF16 ? 0x7F80u : 0x7C00u;
  const uint32_t neg_inf = f32 ? 0xFF800000u : t == optim::GradType::kBF16 ? 0xFF80u : 0xFC00u;
  const std::vector<uint32_t> nans =
      f32                           ? std::vector<uint32_t>{0x7FC00000u, 0xFFC00001u, 0x7F800001u}
      : t == optim::GradType::kBF16 ? std::vector<uint32_t>{0x7FC0u, 0xFFC1u, 0x7F81u}
                                    : std::vector<uint32_t>{0x7E00u, 0xFE01u, 0x7C01u};
  if (input == SqSumInput::kInf || input == SqSumInput::kInfAndNaN) {
    for (int64_t i = 7; i < n; i += 4099) put(i, neg_inf);
    put(n / 3, pos_inf);
  }
  if (input == SqSumInput::kNaN || input == SqSumInput::kInfAndNaN) {
    for (int64_t i = 11; i < n; i += 8191) put(i, nans[static_cast<size_t>(i / 8191) % 3]);
    put(n / 2, nans[0]);
  }
  return bytes;
}

inline uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Sums of squares agree: the same bits, or both NaN (payloads may differ: Note [cuda grad sq sum
// order]).
inline ::testing::AssertionResult same_sq_sum(double expected, double actual) {
  if (bits_of(expected) == bits_of(actual) || (std::isnan(expected) && std::isnan(actual))) {
    return ::testing::AssertionSuccess();
  }
  char text[160];
  std::snprintf(text, sizeof text, "expected %.17g (0x%016llx), got %.17g (0x%016llx)", expected,
                static_cast<unsigned long long>(bits_of(expected)), actual,
                static_cast<unsigned long long>(bits_of(actual)));
  return ::testing::AssertionFailure() << text;
}

}  // namespace pstar::cuda::test
