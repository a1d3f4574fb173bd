// Shared by the CUDA tests: the skip rule for GPU tests, random Adam inputs, and comparisons with
// Note [cuda adam bit identity]'s rule for NaNs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/cuda/device.h"
#include "pstar/optim/host_adam.h"

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

}  // namespace pstar::cuda::test
