// Paths removed when SIGINT or SIGTERM ends the process: the NVMe store's files would otherwise
// outlive a run that is interrupted (its destructors do not run).
//
// Note [nvme cleanup on signals]
// The registry is a fixed table of paths, written before the handler can look at an entry and read
// by the handler with async-signal-safe calls only (unlink, rmdir, sigaction, raise). Its handler
// is installed for SIGINT and SIGTERM on the first registration and stays. Only paths registered
// by the process itself are removed (a child forked without exec inherits the table, and must not
// delete its parent's files when it is killed). On a signal it looks at what handled the signal
// before it:
// - nothing (the default action, death): it unlinks every registered file, removes every
//   registered directory, restores the default action and raises the signal again, so the process
//   still dies of it;
// - a handler (pstar train's graceful stop, core/stop.h): it calls that handler first. Where that
//   handler chose to stop at once (it set the default action back and raised the signal: the second
//   SIGINT), the paths are removed before the handler returns and the process dies; otherwise the
//   run goes on to its own orderly end and the store's destructor removes them.
// The first registration installs it; a program that installs its own handlers later (pstar train's
// StopSignals) calls install_signal_cleanup() after them, so that this one runs first and calls
// theirs. A handler installed after this one that does not call it (and SIGKILL, and a crash)
// leaves the directory behind; the next run's start-up finds it by its dead owner and removes it
// (Note [nvme run directory] in run_dir.h).
#pragma once

#include <string>

namespace pstar::nvme {

enum class CleanupKind { kFile, kDirectory };

// Registers `path` for removal on a signal while this object lives (files are removed before
// directories). When the table is full or the path too long it logs a warning once and registers
// nothing: the start-up check is the fallback.
class CleanupRegistration {
 public:
  CleanupRegistration(const std::string& path, CleanupKind kind);
  ~CleanupRegistration();
  CleanupRegistration(const CleanupRegistration&) = delete;
  CleanupRegistration& operator=(const CleanupRegistration&) = delete;

 private:
  int entry_ = -1;
};

// Installs the handler over the current SIGINT and SIGTERM handlers, which it then calls (a no-op
// where it is installed already).
void install_signal_cleanup();

// The number of paths registered now (tests).
int registered_cleanup_paths();

}  // namespace pstar::nvme
