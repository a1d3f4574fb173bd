// Wall time for logs, metrics and profiles: one clock (steady, so a clock change never makes a
// step take negative time) and one way to read an interval.
#pragma once

#include <chrono>

namespace pstar::core {

using Clock = std::chrono::steady_clock;

// Seconds from `begin` to now.
inline double seconds_since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

}  // namespace pstar::core
