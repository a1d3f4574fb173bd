// The engine's own figures for one optimizer step (ParamEngine::fill_metrics); the trainer's
// StepMetrics (train/metrics.h) holds them beside its own. -1: the engine does not measure it.
#pragma once

#include <cstdint>

namespace pstar::engine {

// Bytes held now and the most held at once (the --metrics file's X_bytes and X_peak_bytes).
struct HeldBytes {
  int64_t current = -1;
  int64_t peak = -1;
};

struct EngineMetrics {
  // Chunk engine only: peak bytes per tier over the step (device: chunks + measured non-model;
  // host: chunks), bytes moved each way.
  int64_t device_peak_bytes = -1;
  // What the device held at most (Note [device footprint] in tier/device_tier.h): on a GPU the
  // CUDA arena, LibTorch's reserved memory and the tier's scratch; on the emulated tier the same as
  // device_peak_bytes. Checked against engine.device_memory (a warning when over).
  int64_t device_reserved_peak_bytes = -1;
  int64_t host_peak_bytes = -1;
  int64_t moved_h2d_bytes = -1;
  int64_t moved_d2h_bytes = -1;
  int64_t prefetched_h2d_bytes = -1;  // of moved_h2d_bytes: uploads started a moment early
  // The seconds the training thread spent moving payloads this step (allocating the destination,
  // copying or queueing the copy, re-pointing the tensors).
  double move_s = -1;
  // What a steady step does not do (Note [speculative adam] in engine/hybrid_adam.h): whole-device
  // synchronisations, the engine's and the tier's own; the host bytes the tier's pools took from
  // the system (a free block of the size asked for is reused otherwise); and the times they were
  // trimmed to stay within engine.host_memory.
  struct Steady {
    int64_t device_syncs = -1;
    int64_t pool_allocated_bytes = -1;
    int64_t pool_trims = -1;
  } steady;
  // Adam's figures (the --metrics file's adam_X keys).
  struct Adam {
    int64_t device_chunks = -1;  // chunks whose Adam ran on the device (the margin)
    // engine.overlap_adam on (-1 otherwise): host chunks whose Adam this step queued on the
    // worker, those of them queued early (in the backward), the seconds this step waited for
    // queued Adam work, and the seconds of host Adam that started in the backward.
    int64_t queued_chunks = -1;
    int64_t early_chunks = -1;
    double wait_s = -1;
    double early_s = -1;
    // Seconds of host Adam finished this step (worker or in place), every kind of job together:
    // early_s / host_s is the share that ran inside the backward.
    double host_s = -1;
    // Host Adam passes this step runs (in place, speculated, redone), and the host memory they
    // read and write (Note [host adam bytes]); the host memory the gradient norm read (every host
    // chunk's gradient, once).
    int64_t host_passes = -1;
    int64_t host_bytes = -1;
    int64_t norm_host_bytes = -1;
    // engine.overlap_adam on: the jobs of other chunks queued ahead of the ones the training thread
    // waited for (0 when every wait is for the job next in line: Note [speculative adam]).
    int64_t waited_behind = -1;
    // Note [speculative adam] (engine.speculative_adam on, -1 otherwise): early chunks queued
    // speculatively this step, those redone with the true multiplier (their speculative update
    // ran), and the seconds of the redone Adam (as the worker finished them).
    int64_t speculated_chunks = -1;
    int64_t rolled_back_chunks = -1;
    double rollback_s = -1;
    // Of speculated_chunks: those whose speculative update was cancelled before it started (the
    // step clipped, or the sums of squares seen so far showed that it would), updated once after
    // the norm.
    int64_t cancelled_chunks = -1;
  } adam;
  // With optimizer payloads on NVMe (engine.nvme_path): bytes the NVMe tier read and wrote, and the
  // seconds the thread running host Adam waited for the disk, over the operations that completed
  // since the previous step's end (queued Adam runs on into the next step).
  struct NvmeIo {
    int64_t read_bytes = -1;
    int64_t write_bytes = -1;
    double wait_s = -1;
  } nvme;
  // Bytes of model data (chunk payloads) this rank holds between steps.
  int64_t model_data_bytes = -1;
  // The host memory the device tier holds for payloads at the step's end, blocks in use and free
  // blocks kept for reuse (Note [exact-size host pool]), in page-locked memory for the payloads
  // that move and in pageable memory for the rest (Note [pinned what moves]; the emulated tier
  // counts what the CUDA tier would pin), and the most each held at once so far.
  HeldBytes pinned, pageable;
  // Several ranks only: payload bytes this rank sent in collectives this step, the wall time spent
  // in them, and the chunk groups gathered and reduced.
  int64_t comm_bytes = -1;
  double comm_s = -1;
  // Bytes copied between device blocks and host blocks around the collectives (Note [staged
  // collectives]): 0 where the host addresses the device side.
  int64_t comm_staged_bytes = -1;
  // Note [collectives beside compute]: the seconds compute waited for the communication thread,
  // and the gathers queued a moment ahead of their use (0 with PSTAR_OVERLAP_COMM=0).
  double comm_wait_s = -1;
  int64_t comm_gathers_ahead = -1;
  int64_t gathers = -1;
  int64_t reductions = -1;
};

}  // namespace pstar::engine
