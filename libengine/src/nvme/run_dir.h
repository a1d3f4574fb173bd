// The run's directory under nvme_path: created at open, removed at close, on SIGINT/SIGTERM and
// after errors, and found and removed by a later run when its process was killed.
//
// Note [nvme run directory]
// <nvme_path>/pstar-<run_id>/ holds the slot file and `owner`: the owning process's pid as text,
// with an exclusive flock(2) held on it for the directory's whole life. The kernel drops the lock
// when the process dies however it dies (SIGKILL, a crash, an OOM kill), and a pid can be reused
// while a lock cannot outlive its holder, so "the lock can be taken" is the test of a dead owner;
// the pid is only for the message. At open every pstar-* directory in nvme_path is checked: one
// whose owner file holds a pid and whose lock can be taken is stale, and is reported (one warning
// naming it) and removed; one whose lock is held belongs to a live run (of this process or
// another) and is left alone. A directory with an empty or missing owner file may be one being
// created this instant (mkdir comes before the owner file), so it is left alone too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pstar/formats/file_guard.h"
#include "pstar/nvme/cleanup.h"

namespace pstar::nvme::detail {

// IoError naming `nvme_path` when it is missing or not a directory.
void check_nvme_path(const std::string& nvme_path);

class RunDir {
 public:
  // Checks nvme_path (IoError naming it when missing, not a directory or unwritable), removes
  // stale run directories there and creates this run's. IoError when a live process owns it.
  RunDir(const std::string& nvme_path, const std::string& run_id);
  // Removes the files named through file() and the directory.
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  // <path>/<name>, registered for removal with the directory (at destruction and on a signal).
  std::string file(const std::string& name);

 private:
  std::string path_;
  formats::UniqueFd owner_fd_;  // holds the flock
  std::vector<std::string> files_;
  std::vector<std::unique_ptr<CleanupRegistration>> registrations_;
};

// Removes the stale pstar-* directories under nvme_path (Note [nvme run directory]); returns
// their paths.
std::vector<std::string> remove_stale_run_dirs(const std::string& nvme_path);

}  // namespace pstar::nvme::detail
