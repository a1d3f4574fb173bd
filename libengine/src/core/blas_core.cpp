// Note [openblas core] (pstar/core/blas_core.h): OpenBLAS's kernels switched from its Prescott
// fallback to the ones the CPU can run, before main. No LibTorch here: OpenBLAS's entry points are
// looked up by name, so that a process whose BLAS is another library simply finds none.
#include "pstar/core/blas_core.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>
#include <mutex>

#include "pstar/base/error.h"

namespace pstar::core {
namespace {

// OpenBLAS's exported entry points of a DYNAMIC_ARCH build (every Debian one): the name of the
// kernels in use, and dropping and redoing the load-time choice, which reads OPENBLAS_CORETYPE.
using CorenameFn = char* (*)();
using VoidFn = void (*)();

template <typename Fn>
Fn find(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

bool same_name(const std::string& a, const std::string& b) {
  return strcasecmp(a.c_str(), b.c_str()) == 0;
}

BlasCoreReport configure() {
  BlasCoreReport report;
  const auto corename = find<CorenameFn>("openblas_get_corename");
  if (corename == nullptr) return report;  // not OpenBLAS (or linked without it)
  report.detected = report.in_use = corename();
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  if (user != nullptr) report.user_coretype = user;
  const BlasCoreChoice choice =
      choose_blas_core(report.detected, user, std::getenv("ATEN_CPU_CAPABILITY"), cpu_vectors());
  if (choice.core.empty()) {
    // Say so only where it matters: Prescott kept on a CPU that could do better is slow.
    if (same_name(report.detected, "Prescott") && user == nullptr)
      report.line = str_cat("blas: OpenBLAS runs its Prescott (SSE3) kernels; ", choice.why);
    return report;
  }
  // Before main nothing calls into OpenBLAS, so no call sees the table change under it.
  report.in_use = switch_blas_core(choice.core);
  if (report.in_use.empty()) {
    report.in_use = report.detected;
    report.line = str_cat("blas: OpenBLAS runs its ", report.detected, " kernels, ", choice.why,
                          ", but this OpenBLAS cannot change them after loading (no "
                          "gotoblas_dynamic_init); start pstar with OPENBLAS_CORETYPE=",
                          choice.core);
    return report;
  }
  report.switched = same_name(report.in_use, choice.core);
  report.line =
      report.switched
          ? str_cat("blas: OpenBLAS chose its ", report.detected, " kernels; ", choice.why,
                    ", so pstar switched it to its ", report.in_use,
                    " kernels (Note [openblas core]; OPENBLAS_CORETYPE overrides)")
          : str_cat("blas: OpenBLAS chose its ", report.detected, " kernels and kept ",
                    report.in_use, " when asked for ", choice.core, " (", choice.why, ")");
  return report;
}

std::once_flag g_once;
BlasCoreReport g_report;

// Note [openblas core]: the switch before main, in every program that can train (device.cpp's
// configure_runtime refers to this file, so the linker keeps it).
[[maybe_unused]] const bool g_before_main = (configure_blas_core(), true);

}  // namespace

CpuVectors cpu_vectors() {
  __builtin_cpu_init();  // may run before libgcc's own constructor (a static initializer)
  CpuVectors v;
  v.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  v.avx512_skx = v.avx2_fma && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl");
  return v;
}

BlasCoreChoice choose_blas_core(const std::string& detected, const char* user_coretype,
                                const char* aten_capability, CpuVectors cpu) {
  if (user_coretype != nullptr)
    return {"", str_cat("OPENBLAS_CORETYPE=", user_coretype, " chooses OpenBLAS's kernels")};
  if (!same_name(detected, "Prescott"))
    return {"", str_cat("OpenBLAS recognised this CPU (", detected, " kernels)")};
  if (!cpu.avx2_fma) return {"", "this CPU has no AVX2 and FMA for better ones"};
  const bool avx2_forced = aten_capability != nullptr && std::string(aten_capability) == "avx2";
  if (cpu.avx512_skx && !avx2_forced)
    return {"SkylakeX", "this CPU, which that OpenBLAS does not recognise, has AVX-512"};
  return {"Haswell", avx2_forced ? "ATEN_CPU_CAPABILITY=avx2 asks for the AVX2 paths"
                                 : "this CPU, which that OpenBLAS does not recognise, has AVX2"};
}

const BlasCoreReport& configure_blas_core() {
  std::call_once(g_once, [] { g_report = configure(); });
  return g_report;
}

std::string switch_blas_core(const std::string& core) {
  const auto corename = find<CorenameFn>("openblas_get_corename");
  const auto quit = find<VoidFn>("gotoblas_dynamic_quit");
  const auto init = find<VoidFn>("gotoblas_dynamic_init");
  if (corename == nullptr || quit == nullptr || init == nullptr) return "";
  // The library's load-time choice, redone: it reads OPENBLAS_CORETYPE first.
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  quit();
  init();
  return corename();
}

std::string blas_core_in_use() {
  const auto corename = find<CorenameFn>("openblas_get_corename");
  return corename == nullptr ? std::string() : std::string(corename());
}

}  // namespace pstar::core
