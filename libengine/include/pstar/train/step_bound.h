// Note [step bound]
// What a training step cannot beat on its machine: the largest of
//   (a) the model's FLOPs (plan::model_flops_per_token times the rank's tokens) over the
//       compute rate;
//   (b) the copies between the tiers: the larger direction's bytes over that direction's rate, or
//       both directions' bytes over the rate of both at once, whichever is larger;
//   (c) the host memory the step reads and writes, over the host's memory bandwidth: host Adam's
//       bytes (Note [host adam bytes]: every pass, a rollback's redo included), the gradient norm's
//       reads of host gradients, and the copies between the tiers, each of which reads or writes
//       its bytes in host memory once (the CUDA tier's DMA; the emulated tier's memcpy touches
//       host memory on both sides, which this leaves out).
// Each term assumes the rest is hidden behind it, so the step can only be slower: step ÷ bound
// says how far a run is from its machine. pstar train measures the rates itself after the run
// (measure_rates, on a tier of its own once the engine is released): a dense matmul in the
// training dtype, which no model's mixture of kernels outruns, so its (a) is a lower bound on
// the bench's, which divides by plain PyTorch's model-FLOPs rate (bench/gpu/gpt_bench.sh).
//
// Note [host rate]
// A term is sound only if its rate is one the step's own work cannot beat. The host memory rate
// was a copy's, bytes read plus bytes written, and the copy's ordinary stores also read each line
// before writing it (write-allocate, not counted), so host Adam, which writes only lines it has
// read and keeps more streams in flight, moved its bytes faster than that rate. On the H200
// (2026-11-27, Llama-3.1-8B speculating) steps came out at 0.97-1.00 of their bound. The rate is
// now the faster of that copy and host Adam's own in-place pass over fp32 state (28 bytes a
// parameter), in pstar train (measure_rates) and in bench/gpu/machine_rates.py (there a four-stream
// in-place PyTorch op stands in for host Adam).
#pragma once

#include <cstdint>
#include <string>

namespace pstar::tier {
class DeviceTier;
}

namespace pstar::train {

// Rates in units per second; 0: not measured (its term is left out).
struct MachineRates {
  double compute_flops = 0;      // dense matmul on the compute device, in the training dtype
  double h2d_bytes = 0;          // host to device, one direction alone
  double d2h_bytes = 0;          // device to host, one direction alone
  double two_way_bytes = 0;      // both directions at once: their bytes together per second
  double host_memory_bytes = 0;  // host memory, bytes read plus bytes written per second
                                 // (Note [host rate])
};

// One step's work, per rank.
struct StepWork {
  double model_flops = 0;
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  int64_t host_adam_bytes = 0;
  int64_t norm_host_bytes = 0;  // the gradient norm's reads of host gradients
  // (c)'s bytes: host Adam's, the norm's and the copies'.
  int64_t host_memory_bytes() const {
    return host_adam_bytes + norm_host_bytes + h2d_bytes + d2h_bytes;
  }
};

struct StepBound {
  double compute_s = 0, copy_s = 0, host_s = 0;
  double seconds() const;
  // "compute", "copies" or "host memory": the term that sets the bound.
  const char* limit() const;
};

StepBound step_bound(const StepWork& work, const MachineRates& rates);

// How much each measurement moves: copies of `copy_bytes` each way, a square matmul of side
// `matmul_side`, a copy of `host_bytes` in host memory and a host Adam pass over arrays of as many
// bytes; each the best of `repeats`.
struct RateSizes {
  int64_t copy_bytes = int64_t{256} << 20;
  int64_t matmul_side = 8192;
  int64_t host_bytes = int64_t{512} << 20;
  int repeats = 3;
};

// The rates of `tier` (its copies between host and device blocks, its compute device's matmul in
// bf16 when `half` or fp32) and of host memory (Note [host rate]: the faster of a copy over
// every core LibTorch uses and host Adam's in-place pass).
MachineRates measure_rates(tier::DeviceTier& tier, bool half, const RateSizes& sizes = {});

// "step 1.569 s = 1.21 x the bound 1.297 s (compute 1.297, copies 0.412, host memory 0.361; set
// by compute)"
std::string describe_bound(double step_s, const StepBound& bound);

}  // namespace pstar::train
