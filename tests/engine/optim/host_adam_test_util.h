// Helpers of the host Adam tests: forcing an ISA or a thread count for a scope, the ISAs this CPU
// has, and bit-for-bit comparison of tensors.
#pragma once

#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/optim/host_adam.h"

namespace pstar::test {

using optim::detail::Isa;

// Forces an ISA for the scope of a test and restores the default afterwards.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) { pstar::optim::detail::set_isa_for_testing(&isa); }
  ~ScopedIsa() { pstar::optim::detail::set_isa_for_testing(nullptr); }
};

class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

inline std::vector<Isa> available_isas() {
  std::vector<Isa> isas = {Isa::kScalar};
  const Isa best = pstar::optim::detail::detected_isa();
  if (static_cast<int>(best) >= static_cast<int>(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  if (best == Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

inline torch::Tensor bits_of(const torch::Tensor& t) {
  return t.element_size() == 4 ? t.view(torch::kInt32) : t.view(torch::kInt16);
}

inline void expect_same_bits(const torch::Tensor& a, const torch::Tensor& b,
                             const std::string& what) {
  const int64_t n_diff = bits_of(a).ne(bits_of(b)).sum().item<int64_t>();
  EXPECT_EQ(n_diff, 0) << what << ": " << n_diff << " elements differ in their bits";
}

}  // namespace pstar::test
