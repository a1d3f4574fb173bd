// PSTAR_TORCH_TRACE: LibTorch's own profiler (Kineto) over chosen training steps, written as a
// Chrome trace (Note [torch trace]). Private to src/train.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pstar::train {

// Note [torch trace]
// ~~~~~~~~~~~~~~~~~~
// `pstar profile` records chunks: where each lives, what moved and when. It cannot say why a GPU
// step is slower than the same model in plain PyTorch, which is a question about kernels, gaps
// between them and the host calls that wait on the device. LibTorch carries the answer: the same
// Kineto profiler that torch.profiler drives, whose Chrome trace ("traceEvents": kernels, copies,
// CUDA runtime calls, ATen operators) opens in Perfetto or chrome://tracing and is summarised by
// bench/gpu/trace_summary.py. It is a developer's tool, switched on by the environment rather than
// the config: PSTAR_TORCH_TRACE=PATH[:STEP[:COUNT]] traces COUNT steps (default 1) from step STEP
// (default 3: after the chunk engine's tracing step and its first planned step), each rank into
// its own file as --metrics does. A LibTorch built without Kineto (Debian's 1.13) writes no file:
// the run says so and trains on.
struct TorchTraceRequest {
  std::string path;
  int64_t first_step = 3;
  int64_t steps = 1;
};

// The request in PSTAR_TORCH_TRACE, or none when it is unset or empty; a malformed value is a
// ConfigError naming the variable and the expected form.
std::optional<TorchTraceRequest> torch_trace_request_from_env();
TorchTraceRequest parse_torch_trace_request(const std::string& value);

// Profiles the steps of one request. before_step/after_step bracket every step of the run; the
// destructor stops a profiler still running (a run that ended early) and writes what it has.
class TorchTrace {
 public:
  TorchTrace(TorchTraceRequest request, bool cuda);
  TorchTrace(const TorchTrace&) = delete;
  TorchTrace& operator=(const TorchTrace&) = delete;
  ~TorchTrace();

  void before_step(int64_t step);
  void after_step(int64_t step);

 private:
  void stop();

  TorchTraceRequest request_;
  bool cuda_;
  bool running_ = false;
  bool done_ = false;
};

}  // namespace pstar::train
