// Where a run's set-up time goes: the phases before step 1, timed, and the progress line of a long
// one (Note [set-up phases]).
//
// Note [set-up phases]
// Building a model of billions of parameters into chunks took minutes on a GPU machine with nothing
// on the screen (issue 35), and one total ("set-up took") could not say which part to make faster.
// So set-up is split into fixed phases, each timed where it runs and added up across the places
// that run it (the engine's registration interleaves model construction, payload allocation,
// initial values and chunk bookkeeping leaf by leaf, and each part times itself there). `pstar
// train` logs the split in one line beside "set-up took" and writes it to the metrics file as a
// start-up record (docs/training.md#metrics-file---metrics-path); what no phase covers is "other".
// A phase that runs longer than 2 s shows a progress line (what, bytes done of the total, rate,
// ETA) through the logger's status line, as training does.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "pstar/core/clock.h"

namespace pstar::core {

// In the order they are logged; the metrics' start-up record names each `<name>_s`.
enum class SetupPhase : uint8_t {
  kRanks,       // joining the other ranks (rendezvous, the same-config check)
  kPlan,        // the config resolved into a run plan (precision probe), the chunk layout and fit
  kTier,        // the device tier: library workspaces measured, the CUDA arena reserved
  kModel,       // the model's modules built (shapes only: values are the phases below)
  kInit,        // initial values written (the counter-based init, Note [counter-based init])
  kWeights,     // weights from model.init_from
  kChunks,      // parameters taken into chunks: bookkeeping, a user model's values copied in
  kAlloc,       // chunk payload memory: allocation (pinned on a GPU) and zeroing
  kEngine,      // the torch engine's set-up (the model moved to its device, master copies)
  kData,        // the training and held-out data opened (scanned)
  kCheckpoint,  // training.save_dir checked
  kResume,      // a checkpoint read (--resume)
};
inline constexpr size_t kNumSetupPhases = 12;

// "plan", "init", ...
const char* setup_phase_name(SetupPhase phase);

class SetupPhases {
 public:
  void add(SetupPhase phase, double seconds, int64_t bytes = 0);
  // Adds every phase of `other`.
  void merge(const SetupPhases& other);
  double seconds(SetupPhase phase) const { return at(phase).seconds; }
  // Bytes the phase wrote (payload bytes for kAlloc, parameter values for kInit and kWeights).
  int64_t bytes(SetupPhase phase) const { return at(phase).bytes; }
  double total_seconds() const;
  // The split for the log: "plan 0.2 s, model 0.4 s, init 1.9 s (1.42 GiB at 760 MiB/s), ...,
  // other 0.1 s" over the phases that took 0.05 s or more, "other" being `total_s` less them all.
  std::string summary(double total_s) const;

 private:
  struct Entry {
    double seconds = 0;
    int64_t bytes = 0;
  };
  const Entry& at(SetupPhase phase) const { return entries_[static_cast<size_t>(phase)]; }
  std::array<Entry, kNumSetupPhases> entries_{};
};

// Times a scope into one phase of `phases` (nothing when null).
class PhaseTimer {
 public:
  PhaseTimer(SetupPhases* phases, SetupPhase phase)
      : phases_(phases), phase_(phase), begin_(Clock::now()) {}
  ~PhaseTimer() { stop(); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  void set_bytes(int64_t bytes) { bytes_ = bytes; }
  // Ends the phase now; returns its seconds (0 after the first call).
  double stop();

 private:
  SetupPhases* phases_;
  SetupPhase phase_;
  Clock::time_point begin_;
  int64_t bytes_ = 0;
  bool stopped_ = false;
};

// The progress of a long piece of set-up on the logger's status line: "WHAT: 1.20 GiB of 6.00 GiB,
// 610 MiB/s, ETA 0:08", shown once it has run for kShowAfterSeconds and redrawn at most every half
// second (the logger prints a plain line at most every few seconds when stderr is not a terminal).
// advance() may be called from any thread.
class SetupProgress {
 public:
  static constexpr double kShowAfterSeconds = 2.0;
  SetupProgress(std::string what, int64_t total_bytes);
  // Ends the status line if it was shown.
  ~SetupProgress();
  SetupProgress(const SetupProgress&) = delete;
  SetupProgress& operator=(const SetupProgress&) = delete;
  void advance(int64_t bytes);
  // Whether the status line was shown (tests).
  bool shown() const { return shown_.load(); }

 private:
  void draw(int64_t done);
  std::string what_;
  int64_t total_;
  Clock::time_point begin_;
  std::atomic<int64_t> done_{0};
  std::atomic<bool> shown_{false};
  std::mutex draw_mutex_;
  Clock::time_point last_draw_{};
};

}  // namespace pstar::core
