// The one rank-aware logger. Library code logs through it and never prints directly: it keeps
// log lines and the live progress line (status) from tearing each other on stderr.
#pragma once

#include <string>

#include "pstar/base/error.h"

namespace pstar::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_level(Level level);
Level level();
// Tags every line with the rank once a run has more than one.
void set_rank(int rank, int world_size);

void write(Level level, const std::string& message);
// A live status line: redrawn in place on a terminal, printed as a plain line (at most every
// few seconds, or when `force`) otherwise. Cleared by the next write().
void status(const std::string& line, bool force = false);
void end_status();

template <typename... Args>
void debug(const Args&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, str_cat(args...));
}
template <typename... Args>
void info(const Args&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, str_cat(args...));
}
template <typename... Args>
void warn(const Args&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, str_cat(args...));
}
template <typename... Args>
void error(const Args&... args) {
  write(Level::kError, str_cat(args...));
}

}  // namespace pstar::log
