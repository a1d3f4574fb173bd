// Records what the chunk engine does into a formats::Profile (`pstar profile`,
// `pstar train --profile`): a row per moment with its memory and every chunk's place, chunk events,
// per-step timings, and memory sampled on a clock by a background thread. docs/profile.md
// describes the file.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pstar/engine/observer.h"
#include "pstar/formats/profile.h"
#include "pstar/train/metrics.h"

namespace pstar::train {

using engine::MemorySample;

// The chunk engine reports to it through engine::EngineObserver (ParamEngine::set_observer).
class Profiler : public engine::EngineObserver {
 public:
  // Samples memory every `period` while a step is recorded.
  explicit Profiler(std::chrono::microseconds period = std::chrono::milliseconds(10));
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  formats::Profile& data();
  bool recording() const override;
  // The engine's layout and budgets into the run attributes, and its chunk table.
  void attach(const engine::EngineShape& shape) override;

  // Steps are recorded from begin_step to end_step; the clock starts at the first begin_step.
  void begin_step(int64_t step);
  // Its forward, backward and optimizer times are metrics.times (Note [step split]).
  void end_step(const StepMetrics& metrics);

  // The engine, once a moment's chunks are in place: opens the moment's row.
  void begin_moment(const std::string& name, formats::ProfileStage stage,
                    const MemorySample& memory, std::vector<int8_t> places) override;
  // The open moment's non-model peak, known when it ends.
  void close_moment(int64_t device_non_model_peak) override;
  void event(int64_t chunk, formats::ChunkEventKind kind, int64_t bytes,
             double duration_s) override;
  // Chunk bytes per tier now, for the clock sampler (cheap; any thread may sample meanwhile).
  void set_chunk_bytes(int64_t device, int64_t host) override;

  // Stops the sampler and writes the file (formats::write_profile).
  void write(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstar::train
