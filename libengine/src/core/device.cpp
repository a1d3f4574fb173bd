#include "pstar/core/device.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include "pstar/base/error.h"
#include "pstar/core/blas_core.h"
#include "pstar/core/log.h"

namespace pstar::core {

c10::Device resolve_device(const std::string& name, const std::string& what) {
  const bool cuda_ok = torch::cuda::is_available();
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name == "cuda") {
    PSTAR_CHECK(cuda_ok, ConfigError, what,
                " cuda: no CUDA device is usable (this build's LibTorch ",
                (torch::cuda::device_count() > 0 ? "sees a GPU but CUDA failed"
                                                 : "has no CUDA or sees no GPU"),
                "); use ", what, " cpu or auto");
    return c10::Device(c10::kCUDA, 0);
  }
  if (name == "auto") return cuda_ok ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  PSTAR_THROW(ConfigError, what, ": unknown device '", name, "'; expected cpu, cuda or auto");
}

namespace {

// Note [heap for activations]
// LibTorch's CPU tensors (activations, temporaries, the batches) come from glibc's malloc. By
// default glibc serves a block of 128 KiB or more with its own mmap and unmaps it when it is freed,
// raising that threshold only after such a block is freed; so whether a step's activations are
// reused or faulted in afresh, page by page on the thread that computes, depended on which large
// blocks the process happened to have freed before (chunk payloads did, until they came from pools
// of their own: Note [exact-size host pool]). On the development machines that was 75k against
// 143k page faults and 8% of a step for gpt-mini. Fixing the thresholds (glibc's largest mmap
// threshold, 32 MiB, and twice that for trimming the heap's top, what glibc's own adjustment would
// reach) keeps every tensor below 32 MiB in the heap for reuse, whatever was freed before.
void configure_heap() {
#ifdef __GLIBC__
  static const bool once = [] {
    // The environment's settings win: glibc has applied them already.
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr &&
        std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) {
      mallopt(M_MMAP_THRESHOLD, 32 << 20);
      mallopt(M_TRIM_THRESHOLD, 64 << 20);
    }
    return true;
  }();
  (void)once;
#endif
}

}  // namespace

void configure_runtime(int64_t ranks_per_host) {
  configure_heap();
  // Note [openblas core]: done before main; said once, where the run's log begins.
  static const bool blas_said = [] {
    const BlasCoreReport& blas = configure_blas_core();
    if (!blas.line.empty()) log::info(blas.line);
    return true;
  }();
  (void)blas_said;
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    // Ranks on one host split its cores: more threads than cores would only contend.
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int share =
        static_cast<int>(std::max<int64_t>(1, cores / std::max<int64_t>(1, ranks_per_host)));
    if (cores > 0 && (ranks_per_host > 1 || torch::get_num_threads() < share))
      torch::set_num_threads(share);
  }
  if (const char* onednn = std::getenv("PSTAR_ONEDNN")) {
    const std::string value = onednn;
    PSTAR_CHECK(value == "0" || value == "1", ConfigError, "PSTAR_ONEDNN=", value,
                ": expected 0 (LibTorch's oneDNN CPU kernels off) or 1 (on, the default)");
    at::globalContext().setUserEnabledMkldnn(value == "1");
  }
}

}  // namespace pstar::core
