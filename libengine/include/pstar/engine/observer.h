// What the chunk engine tells whoever watches it (the profiler, `pstar train --profile`): its
// shape once, then moments, chunk events and chunk bytes as they happen. The engine calls only
// this interface; train/profiler.h implements it, so the engine never includes the layer above.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pstar/formats/profile.h"

namespace pstar::engine {

// Bytes per tier at one instant, or over one moment.
struct MemorySample {
  int64_t device_chunks = 0, device_non_model = 0;
  int64_t host_chunks = 0, host_non_model = 0;
};

// The engine's layout and budgets, given once when an observer is attached.
struct EngineShape {
  int64_t chunk_size = 0, num_chunks = 0;
  int64_t compute_bytes_per_chunk = 0, optimizer_bytes_per_chunk = 0;
  int64_t device_budget = 0, host_budget = 0;
  int64_t world_size = 1, rank = 0;
  int64_t warmup_iterations = 0;
  formats::ProfileChunks chunks;  // one row per chunk
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // The engine it now watches.
  virtual void attach(const EngineShape& shape) = 0;
  // Whether moments are wanted now (a step is being recorded); events are sent regardless.
  virtual bool recording() const = 0;
  // A moment's chunks are in place: its row opens, with every chunk's place (formats::ChunkPlace).
  virtual void begin_moment(const std::string& name, formats::ProfileStage stage,
                            const MemorySample& memory, std::vector<int8_t> places) = 0;
  // The open moment's non-model peak, known when it ends.
  virtual void close_moment(int64_t device_non_model_peak) = 0;
  virtual void event(int64_t chunk, formats::ChunkEventKind kind, int64_t bytes,
                     double duration_s) = 0;
  // Chunk bytes per tier now (cheap; called at every change).
  virtual void set_chunk_bytes(int64_t device, int64_t host) = 0;
};

}  // namespace pstar::engine
