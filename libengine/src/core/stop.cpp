#include "pstar/core/stop.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace pstar::core {
namespace {

volatile sig_atomic_t g_stop_signal = 0;
constexpr int kSignals[2] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
bool g_installed[2] = {false, false};

void write_stderr(const char* text) {
  // Only async-signal-safe calls here; a short write is not worth retrying.
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_signal(int sig) {
  if (g_stop_signal == 0) {
    g_stop_signal = sig;
    return;
  }
  // The second signal: die of it now. Checkpoint files are written to temporaries and renamed,
  // so the last complete checkpoint and `latest` stay as they were.
  write_stderr(sig == SIGINT ? "pstar: second SIGINT: stopping now, without a checkpoint\n"
                             : "pstar: second SIGTERM: stopping now, without a checkpoint\n");
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // pending until this handler returns, then fatal
}

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  // SA_RESTART: a signal must not turn a blocking read or write into a spurious I/O error.
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 2; ++i) {
    ::sigaction(kSignals[i], nullptr, &g_previous[i]);
    g_installed[i] = g_previous[i].sa_handler != SIG_IGN;
    if (g_installed[i]) ::sigaction(kSignals[i], &action, nullptr);
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 2; ++i)
    if (g_installed[i]) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  g_installed[0] = g_installed[1] = false;
}

int stop_signal() { return g_stop_signal; }

void request_stop(int sig) { g_stop_signal = sig; }

}  // namespace pstar::core
