// What OpenBLAS's choice of kernels costs LibTorch's fp32 CPU matmuls (Note [openblas core] in
// pstar/core/blas_core.h): the same torch::mm timed on each of the kernel sets this CPU can run,
// switched in this process, with the Prescott fallback Debian 12's OpenBLAS takes on CPUs it does
// not know as the baseline, and the choice pstar makes at start-up named.
//
// The bound: the CPU's own fused multiply-add rate, one thread per intra-op thread each running
// independent FMA chains in registers at the widest vector width the CPU has (no memory traffic),
// measured in the same run before each kernel set's matmuls, the fastest of those. A matmul cannot
// beat it on an otherwise idle machine.
//
//   pstar-bench-blas [--n 2048] [--rounds 5]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/core/blas_core.h"
#include "pstar/core/device.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kChains = 12;  // independent accumulators: enough to hide an FMA's latency
constexpr int64_t kIters = 20'000'000;

// One thread's kChains FMA chains at one vector width, written out per width (each needs its own
// target attribute, which a template cannot take per instance); returns the FLOPs, 2 per lane per
// FMA. `sink` keeps the loop from being removed.
#define PSTAR_FMA_CHAINS(NAME, TARGET, VEC, LANES, SET1, FMA, STORE)   \
  __attribute__((target(TARGET))) double NAME(float* sink) {           \
    const VEC a = SET1(0.999999f), b = SET1(1e-7f);                    \
    VEC acc[kChains];                                                  \
    for (auto& v : acc) v = SET1(1.0f);                                \
    for (int64_t i = 0; i < kIters; ++i)                               \
      for (auto& v : acc) v = FMA(a, v, b);                            \
    for (int c = 1; c < kChains; ++c) acc[0] = FMA(a, acc[0], acc[c]); \
    alignas(64) float out[LANES];                                      \
    STORE(out, acc[0]);                                                \
    *sink = out[0];                                                    \
    return 2.0 * LANES * kChains * static_cast<double>(kIters);        \
  }
PSTAR_FMA_CHAINS(chains512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_store_ps)
PSTAR_FMA_CHAINS(chains256, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_store_ps)
#undef PSTAR_FMA_CHAINS

// The FMA rate of `threads` threads at the widest width, in FLOP/s (0 without FMA).
double fma_peak(int threads, bool avx512) {
  std::vector<double> flops(static_cast<size_t>(threads));
  std::vector<float> sink(static_cast<size_t>(threads));
  const double begin = now_s();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      flops[static_cast<size_t>(t)] = avx512 ? chains512(&sink[static_cast<size_t>(t)])
                                             : chains256(&sink[static_cast<size_t>(t)]);
    });
  for (auto& w : workers) w.join();
  const double seconds = now_s() - begin;
  double total = 0;
  for (double f : flops) total += f;
  return total / seconds;
}

// The best of `rounds` fp32 n x n x n matmuls, in FLOP/s, after two untimed ones.
double matmul_rate(int64_t n, int rounds) {
  torch::manual_seed(1);
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c;
  for (int i = 0; i < 2; ++i) c = torch::mm(a, b);
  double best = 1e30;
  for (int i = 0; i < rounds; ++i) {
    const double begin = now_s();
    c = torch::mm(a, b);
    best = std::min(best, now_s() - begin);
  }
  return 2.0 * static_cast<double>(n * n * n) / best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 2048;
  int rounds = 5;
  pstar::bench::parse_options(
      argc, argv, "pstar-bench-blas [--n 2048] [--rounds 5]",
      {{"--n", [&](const std::string& v) { n = std::stoll(v); }},
       {"--rounds", [&](const std::string& v) { rounds = std::max(1, std::stoi(v)); }}});
  pstar::core::configure_runtime();
  const pstar::core::BlasCoreReport& report = pstar::core::configure_blas_core();
  if (report.in_use.empty()) {
    std::fprintf(stderr, "this build's BLAS is not OpenBLAS: nothing to compare\n");
    return 1;
  }
  const pstar::core::CpuVectors cpu = pstar::core::cpu_vectors();
  const int threads = torch::get_num_threads();
  std::vector<std::string> cores = {"Prescott"};
  if (cpu.avx2_fma) cores.push_back("Haswell");
  if (cpu.avx512_skx) cores.push_back("SkylakeX");
  // The bound is the fastest FMA rate seen: measured again before each kernel set's matmuls, so
  // that a moment of other load on the machine does not lower it.
  double peak = 0;
  const auto measure_peak = [&] {
    if (cpu.avx2_fma) peak = std::max(peak, fma_peak(threads, cpu.avx512_skx));
  };
  std::vector<double> rates;
  std::vector<std::string> got;  // the kernels OpenBLAS runs when asked for each
  for (const std::string& core : cores) {
    got.push_back(pstar::core::switch_blas_core(core));
    measure_peak();
    rates.push_back(matmul_rate(n, rounds));
  }

  std::printf("fp32 matmul %ld^3 on %d threads; OpenBLAS chose %s at load, pstar runs %s%s\n",
              static_cast<long>(n), threads, report.detected.c_str(), report.in_use.c_str(),
              report.user_coretype.empty() ? "" : " (OPENBLAS_CORETYPE set)");
  if (peak > 0)
    std::printf("bound: %.1f GFLOP/s of %s FMAs in registers on %d threads\n", peak / 1e9,
                cpu.avx512_skx ? "AVX-512" : "AVX2", threads);
  nlohmann::json rows = nlohmann::json::array();
  double baseline = 0;
  for (size_t i = 0; i < cores.size(); ++i) {
    const double rate = rates[i];
    if (i == 0) baseline = rate;
    std::printf("  %-9s %7.1f GFLOP/s  %5.2fx Prescott", got[i].c_str(), rate / 1e9,
                rate / baseline);
    if (peak > 0) std::printf("  %5.1f%% of the bound", 100 * rate / peak);
    std::printf("%s\n", got[i] == report.in_use ? "  <- pstar's choice" : "");
    rows.push_back({{"core", got[i]},
                    {"gflops", rate / 1e9},
                    {"over_prescott", rate / baseline},
                    {"of_bound", peak > 0 ? nlohmann::json(rate / peak) : nlohmann::json()}});
  }
  pstar::core::switch_blas_core(report.in_use);
  std::printf("%s\n", nlohmann::json{{"n", n},
                                     {"threads", threads},
                                     {"detected", report.detected},
                                     {"chosen", report.in_use},
                                     {"fma_peak_gflops", peak / 1e9},
                                     {"cores", rows}}
                          .dump()
                          .c_str());
  return 0;
}
