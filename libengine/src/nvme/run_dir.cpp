#include "run_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "pstar/base/error.h"
#include "pstar/core/log.h"

namespace pstar::nvme::detail {
namespace {

constexpr const char* kPrefix = "pstar-";
constexpr const char* kOwnerFile = "owner";

std::string read_small_file(int fd) {
  char buf[64];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The pid an owner file records, or -1 when it holds none yet.
long owner_pid(int fd) {
  const std::string text = read_small_file(fd);
  char* end = nullptr;
  const long pid = std::strtol(text.c_str(), &end, 10);
  return end != text.c_str() && pid > 0 ? pid : -1;
}

}  // namespace

std::vector<std::string> remove_stale_run_dirs(const std::string& nvme_path) {
  std::vector<std::string> removed;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(nvme_path.c_str()), ::closedir);
  if (!dir) return removed;
  std::vector<std::string> candidates;
  while (const dirent* e = ::readdir(dir.get())) {
    if (std::strncmp(e->d_name, kPrefix, std::strlen(kPrefix)) == 0)
      candidates.push_back(nvme_path + "/" + e->d_name);
  }
  for (const std::string& candidate : candidates) {
    formats::UniqueFd fd(
        formats::open_retrying((candidate + "/" + kOwnerFile).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) continue;  // not a run directory, or one being created: left alone
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a live run's
    const long pid = owner_pid(fd.get());
    if (pid < 0) continue;  // being created this instant: its owner has not written its pid yet
    log::warn("nvme: removing the stale directory ", candidate, " of process ", pid,
              ", which is no longer running");
    std::error_code ec;
    std::filesystem::remove_all(candidate, ec);
    if (ec)
      log::warn("nvme: could not remove all of the stale directory ", candidate, ": ",
                ec.message());
    else
      removed.push_back(candidate);
  }
  return removed;
}

void check_nvme_path(const std::string& nvme_path) {
  struct stat st {};
  if (::stat(nvme_path.c_str(), &st) != 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "nvme_path ", nvme_path, " cannot be used: ", std::strerror(err),
                err == ENOENT
                    ? "; create it (a directory on a fast local disk) or leave nvme_path unset"
                    : "");
  }
  PSTAR_CHECK(S_ISDIR(st.st_mode), IoError, "nvme_path ", nvme_path,
              " is not a directory; give a directory on a fast local disk");
}

RunDir::RunDir(const std::string& nvme_path, const std::string& run_id) {
  PSTAR_CHECK(
      !run_id.empty() && run_id.find('/') == std::string::npos && run_id != "." && run_id != "..",
      ConfigError, "NVMe run id '", run_id,
      "' is not a file name: give a non-empty name without '/'");
  check_nvme_path(nvme_path);
  remove_stale_run_dirs(nvme_path);

  path_ = nvme_path + "/" + kPrefix + run_id;
  if (::mkdir(path_.c_str(), 0700) != 0) {
    const int err = errno;
    if (err == EEXIST) {
      formats::UniqueFd fd(
          formats::open_retrying((path_ + "/" + kOwnerFile).c_str(), O_RDONLY | O_CLOEXEC));
      const long pid = fd ? owner_pid(fd.get()) : -1;
      PSTAR_THROW(IoError, "the NVMe directory ", path_, " is in use",
                  pid > 0 ? str_cat(" by process ", pid) : std::string(),
                  "; give each run, and each rank of a run, its own run id");
    }
    PSTAR_THROW(IoError, "cannot create the NVMe directory ", path_, ": ", std::strerror(err),
                "; nvme_path must be a writable directory");
  }
  // From here the destructor's work must happen on every path out: register it first.
  registrations_.push_back(std::make_unique<CleanupRegistration>(path_, CleanupKind::kDirectory));
  try {
    const std::string owner = file(kOwnerFile);
    owner_fd_ = formats::UniqueFd(
        formats::open_retrying(owner.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    PSTAR_CHECK(owner_fd_, IoError, "cannot create ", owner, ": ", std::strerror(errno));
    // Blocking: another run's start-up may hold the lock for an instant while it looks at this
    // directory (and leaves it alone: the pid is not written yet).
    int rc;
    do rc = ::flock(owner_fd_.get(), LOCK_EX);
    while (rc != 0 && errno == EINTR);
    PSTAR_CHECK(rc == 0, IoError, "cannot lock ", owner, ": ", std::strerror(errno));
    const std::string pid = str_cat(::getpid(), "\n");
    PSTAR_CHECK(
        ::pwrite(owner_fd_.get(), pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size()),
        IoError, "cannot write ", owner, ": ", std::strerror(errno));
  } catch (...) {
    for (const std::string& f : files_) ::unlink(f.c_str());
    ::rmdir(path_.c_str());
    throw;
  }
}

std::string RunDir::file(const std::string& name) {
  std::string path = path_ + "/" + name;
  files_.push_back(path);
  registrations_.push_back(std::make_unique<CleanupRegistration>(path, CleanupKind::kFile));
  return path;
}

RunDir::~RunDir() {
  // The owner file goes last among the files, with its lock still held, so that no other run
  // takes this directory for stale while it is being emptied.
  for (auto it = files_.rbegin(); it != files_.rend(); ++it) ::unlink(it->c_str());
  if (::rmdir(path_.c_str()) != 0 && errno != ENOENT)
    log::warn("nvme: could not remove ", path_, ": ", std::strerror(errno));
  registrations_.clear();
}

}  // namespace pstar::nvme::detail
