// Owned file descriptors and files published by rename: the pieces every writer of a durable
// file shares (checkpoints, profiles, figures, resharded checkpoint folders, the launcher's pipes).
//
// Note [publish by rename]
// A file, or a folder of files, is built under a temporary name beside its destination and renamed
// over it once complete and synced; then the destination's directory is synced, so the rename
// survives a crash too. A crash or an error at any point leaves either the old destination or the
// new one, never a part, and the temporary is removed when its guard is destroyed unpublished.
// AtomicFileWriter (mapped_file.h) writes a file piece by piece this way; TempPath gives the name
// to libraries that insist on opening a path themselves (HDF5, PLplot) and to folders.
#pragma once

#include <string>
#include <utility>

namespace pstar::formats {

// Owns a file descriptor (-1: none); closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset();
  // Closes now; returns 0 or the errno of a failed close, which for a written file can carry a
  // deferred write error on some file systems.
  int close();

 private:
  int fd_ = -1;
};

// open(2), retried on EINTR.
int open_retrying(const char* path, int flags, unsigned mode = 0);

// fsync of a file (flags O_RDONLY) or a directory (O_RDONLY | O_DIRECTORY); 0 or the errno.
int sync_path(const std::string& path, int flags);

// A temporary name beside `target` (Note [publish by rename]): "<dir>/.<name>.tmp.<pid>.<n>",
// unique within the process, with whatever a crashed process of the same pid left there removed.
// Nothing is created: the caller makes a file or a folder at path(). Destroyed unpublished, it
// removes what is there.
class TempPath {
 public:
  explicit TempPath(std::string target);
  ~TempPath();
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;

  const std::string& path() const { return path_; }
  const std::string& target() const { return target_; }

  // Syncs what path() holds (a file; for a folder, the folder itself: its files are synced by
  // whoever wrote them) unless `synced`, renames it over target() (a folder's target must not
  // exist), and syncs target()'s directory. IoError naming the target on any failure; `what`
  // names the kind of file in messages ("profile", "figure").
  void publish(const std::string& what, bool synced = false);

 private:
  std::string target_, path_;
  bool published_ = false;
};

}  // namespace pstar::formats
