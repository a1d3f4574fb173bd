// Choosing the compute device and the process-wide LibTorch settings.
#pragma once

#include <string>

#include <c10/core/Device.h>

namespace pstar::core {

// "cpu", "cuda" or "auto" (CUDA when this build and machine have it). Throws ConfigError naming
// `what` (e.g. "--device") when the choice is unknown or unavailable.
c10::Device resolve_device(const std::string& name, const std::string& what);

// Uses every core for intra-op parallelism unless OMP_NUM_THREADS says otherwise: LibTorch's own
// default counts one thread on some virtual machines.
void configure_threads();

}  // namespace pstar::core
