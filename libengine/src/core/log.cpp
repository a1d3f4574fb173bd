#include "pstar/core/log.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>

namespace pstar::log {
namespace {

struct State {
  std::mutex mutex;
  Level level = Level::kInfo;
  std::string prefix = "[pstar] ";
  bool status_shown = false;  // a live line is on the terminal and must be cleared first
  std::chrono::steady_clock::time_point last_plain_status{};
  bool is_tty = isatty(fileno(stderr)) != 0;
};

State& state() {
  static State s;
  return s;
}

const char* level_tag(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug: ";
    case Level::kInfo:
      return "";
    case Level::kWarn:
      return "warning: ";
    case Level::kError:
      return "error: ";
  }
  return "";
}

void clear_status_locked(State& s) {
  if (s.status_shown) {
    std::fputs("\r\033[K", stderr);
    s.status_shown = false;
  }
}

}  // namespace

void set_level(Level level) { state().level = level; }
Level level() { return state().level; }

void set_rank(int rank, int world_size) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.prefix = world_size > 1 ? str_cat("[pstar r", rank, "] ") : std::string("[pstar] ");
}

void write(Level level, const std::string& message) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  clear_status_locked(s);
  std::fprintf(stderr, "%s%s%s\n", s.prefix.c_str(), level_tag(level), message.c_str());
  std::fflush(stderr);
}

void status(const std::string& line, bool force) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.is_tty) {
    std::fprintf(stderr, "\r\033[K%s%s", s.prefix.c_str(), line.c_str());
    s.status_shown = true;
  } else {
    auto now = std::chrono::steady_clock::now();
    if (!force && now - s.last_plain_status < std::chrono::seconds(5)) return;
    s.last_plain_status = now;
    std::fprintf(stderr, "%s%s\n", s.prefix.c_str(), line.c_str());
  }
  std::fflush(stderr);
}

void end_status() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.status_shown) {
    std::fputs("\n", stderr);
    s.status_shown = false;
    std::fflush(stderr);
  }
}

}  // namespace pstar::log
