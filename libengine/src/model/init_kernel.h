// The counter-based generator's kernel (Note [counter-based init] in pstar/model/init.h), private
// to model/: init_kernel.cpp, compiled with -ffp-contract=off and without LibTorch, so that every
// element's bits are the same whichever vector width the compiler gives it.
#pragma once

#include <cstdint>

#include "pstar/model/init.h"
#include "pstar/optim/host_adam.h"  // optim::detail::Isa

namespace pstar::model::init_kernel {

// Philox4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1), in place.
void philox(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1);

// Elements [begin, end) of one write's parameter (relative to the parameter, so write.begin <=
// begin <= end <= write.end) into its outputs, with the instruction set in use (the same bits with
// any: init_kernel_impl.h).
void write_range(uint64_t seed, const InitWrite& write, int64_t begin, int64_t end);

// The instruction set write_range uses, and the tests' way to pick another (clamped to what the
// CPU has; null: the default again). Not thread-safe against running kernels.
optim::detail::Isa active_isa();
optim::detail::Isa set_isa_for_testing(const optim::detail::Isa* isa);
const char* isa_in_use();

}  // namespace pstar::model::init_kernel
