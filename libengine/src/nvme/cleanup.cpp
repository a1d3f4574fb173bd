#include "pstar/nvme/cleanup.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "pstar/core/log.h"

namespace pstar::nvme {
namespace {

// Note [nvme cleanup on signals] (cleanup.h).
constexpr int kEntries = 32;
enum State : int { kFree = 0, kBusy = 1, kReady = 2 };

struct Entry {
  std::atomic<int> state{kFree};
  CleanupKind kind = CleanupKind::kFile;
  pid_t owner = 0;  // a child forked without exec inherits the table: never remove the parent's
  char path[PATH_MAX] = {};
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads the states");

Entry g_entries[kEntries];
constexpr int kSignals[2] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
std::once_flag g_install_once;
std::mutex g_install_mutex;

void remove_all_registered() {
  const pid_t self = ::getpid();
  // Files first, so that the directories are empty when their turn comes.
  for (const CleanupKind kind : {CleanupKind::kFile, CleanupKind::kDirectory}) {
    for (Entry& e : g_entries) {
      if (e.state.load(std::memory_order_acquire) != kReady || e.kind != kind) continue;
      if (e.owner != self) continue;
      if (kind == CleanupKind::kFile)
        ::unlink(e.path);
      else
        ::rmdir(e.path);
    }
  }
}

bool is_default(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) == 0 && a.sa_handler == SIG_DFL;
}

void on_signal(int sig, siginfo_t* info, void* context) {
  const int i = sig == SIGINT ? 0 : 1;
  const struct sigaction& prev = g_previous[i];
  if (is_default(prev)) {
    remove_all_registered();
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // blocked until this handler returns, then fatal
    return;
  }
  if ((prev.sa_flags & SA_SIGINFO) != 0)
    prev.sa_sigaction(sig, info, context);
  else
    prev.sa_handler(sig);
  // Did that handler decide that the process dies now?
  struct sigaction now {};
  if (::sigaction(sig, nullptr, &now) == 0 && is_default(now)) remove_all_registered();
}

bool is_ours(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) != 0 && a.sa_sigaction == on_signal;
}

}  // namespace

void install_signal_cleanup() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  for (int i = 0; i < 2; ++i) {
    struct sigaction current {};
    ::sigaction(kSignals[i], nullptr, &current);
    if (is_ours(current)) continue;
    // An ignored signal does not end the process: nothing to clean up for it.
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN) continue;
    g_previous[i] = current;
    struct sigaction action {};
    action.sa_sigaction = on_signal;
    // SA_RESTART as core/stop.cpp: a signal must not turn a blocking read or write into an error.
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(kSignals[i], &action, nullptr);
  }
}

CleanupRegistration::CleanupRegistration(const std::string& path, CleanupKind kind) {
  std::call_once(g_install_once, install_signal_cleanup);
  if (path.size() >= PATH_MAX) {
    log::warn("nvme: ", path, " is too long to be removed on a signal; a later run removes it");
    return;
  }
  for (int i = 0; i < kEntries; ++i) {
    int expected = kFree;
    if (!g_entries[i].state.compare_exchange_strong(expected, kBusy)) continue;
    Entry& e = g_entries[i];
    std::memcpy(e.path, path.c_str(), path.size() + 1);
    e.kind = kind;
    e.owner = ::getpid();
    e.state.store(kReady, std::memory_order_release);
    entry_ = i;
    return;
  }
  log::warn("nvme: more than ", kEntries, " paths to remove on a signal; ", path,
            " is left to a later run's start-up check");
}

CleanupRegistration::~CleanupRegistration() {
  if (entry_ < 0) return;
  Entry& e = g_entries[entry_];
  e.state.store(kBusy, std::memory_order_release);
  e.path[0] = '\0';
  e.state.store(kFree, std::memory_order_release);
}

int registered_cleanup_paths() {
  int n = 0;
  for (const Entry& e : g_entries) n += e.state.load() == kReady ? 1 : 0;
  return n;
}

}  // namespace pstar::nvme
