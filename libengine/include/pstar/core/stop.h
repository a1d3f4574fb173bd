// Graceful stops on SIGINT/SIGTERM (Note [graceful stop] in train/trainer_step.cpp). The first
// signal only raises a flag that long-running work polls at safe points; a second one ends the
// process at once, by the signal itself, without running anything that could touch a checkpoint.
#pragma once

namespace pstar::core {

// Installs the handlers for its lifetime and restores the previous ones after. A signal the
// parent set to be ignored (nohup) stays ignored. One at a time.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The signal that asked for a stop (SIGINT or SIGTERM), or 0. Async-signal-safe reads.
int stop_signal();
inline bool stop_requested() { return stop_signal() != 0; }
// As if `sig` had arrived once (tests, and ranks told by another rank); 0 clears the request.
void request_stop(int sig);

}  // namespace pstar::core
