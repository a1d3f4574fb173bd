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

#include "pstar/formats/profile.h"

namespace pstar::train {

// Bytes per tier at one instant, or over one moment.
struct MemorySample {
  int64_t device_chunks = 0, device_non_model = 0;
  int64_t host_chunks = 0, host_non_model = 0;
};

struct StepTimes {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
};

struct StepMetrics;

class Profiler {
 public:
  // Samples memory every `period` while a step is recorded.
  explicit Profiler(std::chrono::microseconds period = std::chrono::milliseconds(10));
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  formats::Profile& data();
  bool recording() const;

  // Steps are recorded from begin_step to end_step; the clock starts at the first begin_step.
  void begin_step(int64_t step);
  void end_step(const StepMetrics& metrics, const StepTimes& times);

  // The engine, once a moment's chunks are in place: opens the moment's row.
  void begin_moment(const std::string& name, formats::ProfileStage stage,
                    const MemorySample& memory, std::vector<int8_t> places);
  // The open moment's non-model peak, known when it ends.
  void close_moment(int64_t device_non_model_peak);
  void event(int64_t chunk, formats::ChunkEventKind kind, int64_t bytes, double duration_s);
  // Chunk bytes per tier now, for the clock sampler (cheap; any thread may sample meanwhile).
  void set_chunk_bytes(int64_t device, int64_t host);

  // Stops the sampler and writes the file (formats::write_profile).
  void write(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstar::train
