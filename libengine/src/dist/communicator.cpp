// What every communicator shares, and why a build has no NCCL one.
#include "pstar/dist/communicator.h"

#include <cstring>

#include "pstar/base/error.h"
#include "pstar/core/torch_compat.h"

namespace pstar::dist {

double Communicator::all_reduce_sum(double value) {
  std::vector<double> v{value};
  all_reduce_sum(v);
  return v[0];
}

void Communicator::reduce_scatter_flat(float* flat, int64_t numel) {
  // Host memory only: a device communicator reduces its flat buffers itself (Note [flat
  // collectives]).
  PSTAR_INTERNAL_ASSERT(!on_device(), "a device communicator without its own reduce_scatter_flat");
  std::vector<float> sum(static_cast<size_t>(numel));
  reduce_scatter(
      numel,
      [&](int64_t part, float* acc) {
        const float* mine = flat + part * numel;
        for (int64_t i = 0; i < numel; ++i) acc[i] += mine[i];
      },
      sum.data());
  std::memcpy(flat + rank() * numel, sum.data(), static_cast<size_t>(numel) * sizeof(float));
}

std::string nccl_missing_reason() {
#if PSTAR_HAVE_NCCL_COMMUNICATOR
  return {};
#elif PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  // sources.cmake builds the NCCL communicator with a CUDA LibTorch 2.x and PSTAR_WITH_NCCL.
  return str_cat(
      "it was built without pstar's NCCL communicator (LibTorch ", compat::torch_version(),
      "; it needs a CUDA LibTorch with c10d's ProcessGroupNCCL and -DPSTAR_WITH_NCCL=ON)");
#else
  // Debian's LibTorch 1.13 is built without CUDA, so without c10d's ProcessGroupNCCL.
  return str_cat("its LibTorch ", compat::torch_version(),
                 " has no ProcessGroupNCCL; pstar's NCCL communicator is built against a CUDA "
                 "LibTorch 2.x, as scripts/gpu-verify.sh does");
#endif
}

#if !PSTAR_HAVE_NCCL_COMMUNICATOR
std::unique_ptr<Communicator> connect_nccl(std::unique_ptr<Communicator> /*host*/, int /*device*/,
                                           std::chrono::seconds /*timeout*/) {
  PSTAR_THROW(ConfigError, "distributed.backend \"nccl\": this build of pstar cannot use it: ",
              nccl_missing_reason(), "; set distributed.backend to \"gloo\"");
}
#endif

}  // namespace pstar::dist
