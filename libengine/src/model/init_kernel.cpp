// The counter-based generator (Note [counter-based init] in pstar/model/init.h): the baseline
// x86-64 kernel, the dispatch to the vector instruction sets and the scalar Philox tests compare
// with LibTorch's. Compiled with -ffp-contract=off and -fno-math-errno, without LibTorch
// (model/sources.cmake).
#include <atomic>
#include <cstdlib>
#include <string>

#define PSTAR_INIT_ISA scalar
#include "init_kernel_impl.h"
#undef PSTAR_INIT_ISA

#include "pstar/base/error.h"
#include "pstar/optim/host_adam.h"

namespace pstar::model::init_kernel {

namespace avx2 {
void write_range(uint64_t seed, const InitWrite& w, int64_t begin, int64_t end);
}
namespace avx512 {
void write_range(uint64_t seed, const InitWrite& w, int64_t begin, int64_t end);
}

namespace {

using optim::detail::Isa;

// Philox4x32's constants: the kernels' own.
using scalar::kMul0;
using scalar::kMul1;
using scalar::kRounds;
using scalar::kWeyl0;
using scalar::kWeyl1;

// The best instruction set this CPU has, or a lower one PSTAR_INIT_ISA (scalar|avx2|avx512) asks
// for; read once.
Isa default_isa() {
  static const Isa isa = [] {
    const char* env = std::getenv("PSTAR_INIT_ISA");
    const std::string value = env != nullptr ? env : "";
    PSTAR_CHECK(value.empty() || value == "scalar" || value == "avx2" || value == "avx512",
                ConfigError, "PSTAR_INIT_ISA='", value,
                "' is not an ISA; use scalar, avx2 or avx512");
    return optim::detail::resolve_isa(env, optim::detail::detected_isa());
  }();
  return isa;
}

std::atomic<int> g_isa_override{-1};

}  // namespace

void philox(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t p0 = uint64_t{kMul0} * c0;
    const uint64_t p1 = uint64_t{kMul1} * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<uint32_t>(p0);
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
}

const char* isa_in_use() { return optim::detail::isa_name(active_isa()); }

Isa active_isa() {
  const int forced = g_isa_override.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : default_isa();
}

Isa set_isa_for_testing(const Isa* isa) {
  g_isa_override.store(
      isa == nullptr ? -1 : static_cast<int>(std::min(*isa, optim::detail::detected_isa())),
      std::memory_order_relaxed);
  return active_isa();
}

void write_range(uint64_t seed, const InitWrite& w, int64_t begin, int64_t end) {
  switch (active_isa()) {
    case Isa::kAvx512:
      return avx512::write_range(seed, w, begin, end);
    case Isa::kAvx2:
      return avx2::write_range(seed, w, begin, end);
    case Isa::kScalar:
      return scalar::write_range(seed, w, begin, end);
  }
}

}  // namespace pstar::model::init_kernel
