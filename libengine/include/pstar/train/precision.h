// Choosing bf16 only where it pays: a start-up probe of the compute device's matmul kernels
// decides `bf16.enabled: "auto"`, and explicit bf16 on a device where it is slow gets a warning.
#pragma once

#include <string>

#include <c10/core/Device.h>

#include "pstar/formats/config.h"

namespace pstar::train {

// Note [bf16 on CPUs]
// LibTorch 1.13 sends a CPU bf16 matmul to oneDNN only when the CPU has AVX-512 (BW/VL/DQ);
// oneDNN then runs it on AVX-512 BF16 or AMX instructions with fp32 accumulation, and bf16 is
// 2-4x faster than fp32. Every other CPU (AVX2-only ones such as many AMD EPYC, or any CPU with
// oneDNN turned off: PSTAR_ONEDNN=0) takes ATen's fallback GEMM, which is scalar and rounds its
// running sum to bf16 after every multiply-add: 10-20x slower than fp32, and with a relative error
// that grows with the inner dimension (3.7e-2 at K = 1024, against 1.7e-3 with fp32
// accumulation, measured on the development machine). Training still converges there, but
// tracks fp32 less closely. So "auto" picks bf16 only when the probe finds bf16 matmuls both
// faster than fp32 and accumulated accurately; the thresholds sit far from both kinds of kernel.

struct Bf16Probe {
  bool supported = true;           // false: this LibTorch has no bf16 matmul on the device
  std::string unsupported_reason;  // LibTorch's message when !supported
  double bf16_gflops = 0;          // best of a few n×n×n matmuls (n = 512 on a CPU)
  double fp32_gflops = 0;
  // ||C - exact|| / ||exact|| for a 64×1024×64 matmul of bf16 inputs, the exact product computed
  // in float64 from the same inputs: how the kernel accumulates, not how inputs round.
  double bf16_relative_error = 0;

  static constexpr double kMinSpeedup = 1.0;
  static constexpr double kMaxRelativeError = 1e-2;

  double speedup() const { return fp32_gflops > 0 ? bf16_gflops / fp32_gflops : 0.0; }
  // What "auto" asks of bf16: supported, at least as fast as fp32, and accumulated in fp32.
  bool fast() const;
  // e.g. "bf16 matmul 430 GFLOP/s vs fp32 108 GFLOP/s (3.98x), accumulation error 1.7e-03"
  std::string describe() const;
};

// Measures the device now: about 0.1 s on a CPU with fast bf16 kernels, 0.5 s without. Uses a
// private random generator, so the process's random stream is untouched.
Bf16Probe measure_bf16(c10::Device device);

// measure_bf16, once per process for each device and oneDNN setting.
Bf16Probe bf16_probe(c10::Device device);

// Why "auto" chose what it chose, for the run plan's log line: the probe's numbers and the rule
// (bf16.enabled "auto" is resolved with the other decisions of a run: plan::resolve_run, fed by
// gather_run_facts in run_facts.h).
std::string describe_bf16_verdict(const Bf16Probe& probe);

// For bf16.enabled true: bf16 trains as asked, and where the probe finds it slow or inaccurate on
// `device`, one warning per process says so with the numbers.
void warn_if_bf16_slow(c10::Device device);

}  // namespace pstar::train
