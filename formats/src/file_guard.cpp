#include "pstar/formats/file_guard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "pstar/base/error.h"

namespace pstar::formats {

namespace fs = std::filesystem;

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int UniqueFd::close() {
  const int fd = std::exchange(fd_, -1);
  return fd < 0 || ::close(fd) == 0 ? 0 : errno;
}

int open_retrying(const char* path, int flags, unsigned mode) {
  int fd;
  do {
    fd = ::open(path, flags, static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  return fd;
}

int sync_path(const std::string& path, int flags) {
  UniqueFd fd(open_retrying(path.c_str(), flags | O_CLOEXEC));
  if (!fd) return errno;
  if (::fsync(fd.get()) != 0) return errno;
  return 0;
}

TempPath::TempPath(std::string target) : target_(std::move(target)) {
  const fs::path t(target_);
  static std::atomic<uint64_t> counter{0};
  path_ = (t.parent_path() /
           str_cat(".", t.filename().string(), ".tmp.", ::getpid(), ".", counter.fetch_add(1)))
              .string();
  std::error_code ec;
  fs::remove_all(path_, ec);  // a crashed process with the same pid
}

TempPath::~TempPath() {
  if (published_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void TempPath::publish(const std::string& what, bool synced) {
  PSTAR_INTERNAL_ASSERT(!published_, "'", target_, "' published twice");
  std::error_code ec;
  const bool folder = fs::is_directory(path_, ec);
  if (!synced) {
    const int err = sync_path(path_, folder ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    PSTAR_CHECK(err == 0 || (folder && err == EINVAL), IoError, "cannot write ", what, " '",
                target_, "': fsync of '", path_, "' failed: ", std::strerror(err));
  }
  fs::rename(path_, target_, ec);
  PSTAR_CHECK(!ec, IoError, "cannot write ", what, " '", target_, "': renaming '", path_,
              "' over it failed: ", ec.message());
  published_ = true;
  // Make the rename durable; some file systems cannot fsync a directory (EINVAL), and there the
  // data is synced already.
  const std::string dir = fs::path(target_).parent_path().string();
  const int err = sync_path(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
  PSTAR_CHECK(err == 0 || err == EINVAL, IoError, "wrote ", what, " '", target_,
              "' but could not sync its directory: ", std::strerror(err),
              "; it may not survive a crash");
}

}  // namespace pstar::formats
