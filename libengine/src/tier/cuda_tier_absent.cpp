// The CUDA tier's entry points in builds without it (no CUDA LibTorch, or no pstar_cuda): asking
// for it says what this build lacks and how to get a build that has it.
#include "pstar/base/error.h"
#include "pstar/tier/device_tier.h"

namespace pstar::tier {

bool cuda_tier_built() { return false; }

namespace {

[[noreturn]] void no_cuda_tier(int device_index) {
  PSTAR_THROW(ConfigError, "--device cuda:", device_index,
              ": this build of pstar has no CUDA device tier (it needs a CUDA LibTorch and the "
              "CUDA kernels, pstar_cuda). Configure one with the cuda-release preset against a "
              "CUDA LibTorch: cmake --preset cuda-release -DCMAKE_PREFIX_PATH=\"$(python3 -c "
              "'import torch.utils; print(torch.utils.cmake_prefix_path)')\" (docs/cuda.md). "
              "Until then, train with --device cpu.");
}

}  // namespace

std::unique_ptr<DeviceTier> make_cuda_tier(int device_index, int64_t) {
  no_cuda_tier(device_index);
}

int64_t cuda_free_bytes(int device_index) { no_cuda_tier(device_index); }

std::string cuda_pci_bus_id(int device_index) { no_cuda_tier(device_index); }

int64_t cuda_library_workspace_bytes(int device_index, c10::ScalarType) {
  no_cuda_tier(device_index);
}

}  // namespace pstar::tier
