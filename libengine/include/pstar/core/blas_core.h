// Which of OpenBLAS's kernels LibTorch's fp32 CPU matmuls run on (Note [openblas core]).
#pragma once

#include <string>

namespace pstar::core {

// Note [openblas core]: Debian 12's OpenBLAS (0.3.21, built for every x86-64 core and choosing
// one at load time) names the CPU by its family and model numbers, and takes its oldest 64-bit
// kernels, "Prescott" (SSE3), for a model it does not know: every Intel model newer than it
// (Sapphire Rapids 143, Emerald Rapids 207, ...), and virtual machines that report such a model.
// fp32 matmuls then run at about a fifth of the rate the same CPU reaches with its AVX-512
// ("SkylakeX") kernels (bench/README.md, `pstar-bench-blas`). OpenBLAS fixed the fallback in 0.3.25
// (it now falls back by the CPU's features); for the versions before, pstar makes the same choice
// itself: where the library took Prescott, OPENBLAS_CORETYPE is unset and the CPU has AVX2 and FMA,
// it switches the library to its SkylakeX kernels (AVX-512 F, BW, DQ and VL) or its Haswell ones
// (AVX2), and sets OPENBLAS_CORETYPE to that name for the processes it starts (the ranks of
// --nproc), whose OpenBLAS then chooses it at load. The switch happens before main (a static
// initializer of blas_core.cpp), so that no matmul of the process runs on the other kernels.
// ATEN_CPU_CAPABILITY=avx2 (the AVX2 paths forced, docs/training.md) chooses Haswell. A user's
// OPENBLAS_CORETYPE always wins, and a BLAS other than OpenBLAS (MKL in PyTorch's wheels) is left
// alone. The kernels differ in the order they add products, so results differ in the last bits
// between them, as between machines.

// The vector units that decide which kernels can run.
struct CpuVectors {
  bool avx2_fma = false;    // Haswell's kernels
  bool avx512_skx = false;  // SkylakeX's: AVX-512 F, BW, DQ and VL, enabled by the OS
};
CpuVectors cpu_vectors();

// The core to switch OpenBLAS to, or an empty `core` to leave its choice; `why` is the reason
// either way, a phrase for the start-up line. `detected`: the library's choice
// (openblas_get_corename()); `user_coretype` and `aten_capability`: OPENBLAS_CORETYPE and
// ATEN_CPU_CAPABILITY, or null.
struct BlasCoreChoice {
  std::string core;
  std::string why;
};
BlasCoreChoice choose_blas_core(const std::string& detected, const char* user_coretype,
                                const char* aten_capability, CpuVectors cpu);

// What the process did, once (the first call decides; thread-safe): `detected` is OpenBLAS's own
// choice and `in_use` the kernels running now (both empty without OpenBLAS); `line` is the
// start-up log's sentence, empty when there is nothing to say.
struct BlasCoreReport {
  std::string user_coretype;  // OPENBLAS_CORETYPE as the process found it ("" when unset)
  std::string detected;
  std::string in_use;
  bool switched = false;
  std::string line;
};
const BlasCoreReport& configure_blas_core();

// OpenBLAS's kernels in use now, or "" where the process's BLAS is not OpenBLAS.
std::string blas_core_in_use();

// Switches OpenBLAS to the kernels named `core` (OpenBLAS's names: "Prescott", "Haswell",
// "SkylakeX", ...) and sets OPENBLAS_CORETYPE to it, for pstar-bench-blas, which times each; the
// kernels in use afterwards ("" without OpenBLAS or where its choice cannot be redone). Only while
// no BLAS call runs, and only kernels the CPU can run (OpenBLAS does not check).
std::string switch_blas_core(const std::string& core);

}  // namespace pstar::core
