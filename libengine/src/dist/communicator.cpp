// What every communicator shares, and why this build has no NCCL one.
#include "pstar/dist/communicator.h"

#include "pstar/base/error.h"
#include "pstar/core/torch_compat.h"

namespace pstar::dist {

double Communicator::all_reduce_sum(double value) {
  std::vector<double> v{value};
  all_reduce_sum(v);
  return v[0];
}

std::string nccl_missing_reason() {
  // Debian's LibTorch 1.13 is built without CUDA, so without c10d's ProcessGroupNCCL, and 1.13's
  // NCCL group differs from 2.x's in the calls the communicator needs: it is meant for a CUDA
  // LibTorch 2.x only, where it is not written yet either.
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 0)
  return str_cat("pstar's NCCL communicator over LibTorch ", compat::torch_version(),
                 "'s ProcessGroupNCCL is not written yet (issue 36)");
#else
  return str_cat("its LibTorch ", compat::torch_version(),
                 " has no ProcessGroupNCCL, and pstar's NCCL communicator, for a build against a "
                 "CUDA LibTorch 2.x as scripts/gpu-verify.sh makes, is not written yet (issue 36)");
#endif
}

}  // namespace pstar::dist
