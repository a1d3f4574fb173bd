// What one optimizer step reports (StepMetrics: the trainer's figures and the engine's, filled by
// ParamEngine::fill_metrics), and the --metrics file that writes it: JSON Lines, one object per
// step, flushed as it is written so a crashed run keeps every finished step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace pstar::train {

struct StepMetrics {
  int64_t step = 0;       // 1-based
  double loss = 0;        // mean cross-entropy over the step's tokens, before the update
  double lr = 0;          // the rate this step's update used
  double grad_norm = 0;   // global L2 norm of the (unscaled) gradient, before clipping
  double loss_scale = 1;  // fp16 loss scale used this step (1 otherwise)
  bool skipped = false;   // fp16 overflow: no update was made
  int64_t tokens = 0;     // tokens trained on so far, this step included
  double step_time_s = 0;
  double tokens_per_s = 0;  // this step's throughput
  double elapsed_s = 0;     // since the first step started
  // Chunk engine only (-1 otherwise): peak bytes per tier over the step (device: chunks + measured
  // non-model; host: chunks), bytes moved each way, chunks whose Adam ran on the device.
  int64_t device_peak_bytes = -1;
  // What the device held at most (Note [device footprint] in tier/device_tier.h): on a GPU the
  // CUDA arena, LibTorch's reserved memory and the tier's scratch; on the emulated tier the same as
  // device_peak_bytes. Checked against engine.device_memory (a warning when over).
  int64_t device_reserved_peak_bytes = -1;
  // Whole-device synchronisations this step, the engine's and the tier's own: 0 at steady state.
  int64_t device_syncs = -1;
  int64_t host_peak_bytes = -1;
  int64_t moved_h2d_bytes = -1;
  int64_t moved_d2h_bytes = -1;
  int64_t prefetched_h2d_bytes = -1;  // of moved_h2d_bytes: uploads started a moment early
  // Chunk engine only (-1 otherwise): the seconds the training thread spent moving payloads this
  // step (allocating the destination, copying or queueing the copy, re-pointing the tensors).
  double move_s = -1;
  int64_t adam_device_chunks = -1;
  // engine.overlap_adam on (-1 otherwise): host chunks whose Adam this step queued on the worker,
  // those of them queued early (in the backward), and the seconds this step waited for queued
  // Adam work.
  int64_t adam_queued_chunks = -1;
  int64_t adam_early_chunks = -1;
  double adam_wait_s = -1;
  // Bytes of model data (chunk payloads) this rank holds between steps; -1 for the torch engine.
  int64_t model_data_bytes = -1;
  // Chunk engine only (-1 otherwise): the host memory its device tier holds for payloads at the
  // step's end, blocks in use and free blocks kept for reuse (Note [exact-size host pool]), in
  // page-locked memory for the payloads that move and in pageable memory for the rest (Note
  // [pinned what moves]; the emulated tier counts what the CUDA tier would pin), and the most
  // each held at once so far.
  int64_t pinned_bytes = -1, pinned_peak_bytes = -1;
  int64_t pageable_bytes = -1, pageable_peak_bytes = -1;
  // Several ranks only (-1 otherwise): payload bytes this rank sent in collectives this step,
  // the wall time spent in them, and the chunk groups gathered and reduced.
  int64_t comm_bytes = -1;
  double comm_s = -1;
  int64_t gathers = -1;
  int64_t reductions = -1;
};

class MetricsWriter {
 public:
  // Truncates `path`; IoError naming it if it cannot be created.
  explicit MetricsWriter(const std::string& path);
  void write(const StepMetrics& metrics);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

}  // namespace pstar::train
