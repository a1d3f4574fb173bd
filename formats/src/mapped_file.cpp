#include "pstar/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "pstar/base/error.h"
#include "pstar/formats/file_guard.h"

namespace pstar::formats {
namespace {

std::string os_reason(int err) { return std::strerror(err); }

// "dir/name" -> "dir"; "name" -> "."; "/name" -> "/".
std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  UniqueFd fd(open_retrying(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot open '", path, "' for reading: ", os_reason(err),
                "; check that the file exists and is readable");
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot stat '", path, "': ", os_reason(err));
  }
  PSTAR_CHECK(S_ISREG(st.st_mode), IoError, "cannot map '", path,
              "': it is not a regular file; give the path of a file");
  size_ = static_cast<size_t>(st.st_size);
  // mmap rejects a length of 0; an empty file is valid and simply has no bytes.
  if (size_ == 0) return;
  void* addr = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    PSTAR_THROW(IoError, "cannot memory-map '", path, "' (", st.st_size,
                " bytes): ", os_reason(err));
  }
  data_ = static_cast<const uint8_t*>(addr);
  // The mapping stays valid after the descriptor is closed.
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void write_file_atomic(const std::string& path, const void* bytes, size_t size) {
  PSTAR_INTERNAL_ASSERT(bytes != nullptr || size == 0, "write_file_atomic('", path,
                        "'): null data with size ", size);
  AtomicFileWriter file(path);
  file.write_at(0, bytes, size);
  file.commit();
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  PSTAR_CHECK(!path.empty() && path.back() != '/', ConfigError, "cannot write '", path,
              "': the path names no file; give a file path");
  const std::string dir = parent_dir(path);
  const std::string base = path.substr(path.find_last_of('/') + 1);

  // The temporary lives in the destination's directory so the rename cannot cross file systems.
  // The pid and a per-process counter keep concurrent writers (processes and threads) apart;
  // O_EXCL guards against a stale file left by a crashed process that had the same pid.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_path_ = str_cat(dir, "/.", base, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    fd_ = open_retrying(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot write '", path, "': cannot create a temporary file in '", dir,
                "': ", os_reason(err), "; check that the directory exists and is writable");
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write_at(uint64_t offset, const void* bytes, size_t size) {
  PSTAR_INTERNAL_ASSERT(fd_ >= 0, "writing '", path_, "' after commit");
  PSTAR_INTERNAL_ASSERT(bytes != nullptr || size == 0, "writing null data to '", path_, "'");
  const auto* p = static_cast<const uint8_t*>(bytes);
  size_t left = size;
  while (left > 0) {
    const ssize_t n =
        ::pwrite(fd_, p, left, static_cast<off_t>(offset + static_cast<uint64_t>(size - left)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      PSTAR_THROW(IoError, "cannot write '", path_, "': writing ", size, " bytes to '", temp_path_,
                  "' failed after ", size - left, " bytes: ", os_reason(err),
                  "; check free space and file size limits");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  end_ = std::max<uint64_t>(end_, offset + size);
}

void AtomicFileWriter::append(const void* bytes, size_t size) { write_at(end_, bytes, size); }

void AtomicFileWriter::commit() {
  PSTAR_INTERNAL_ASSERT(fd_ >= 0, "'", path_, "' committed twice");
  // A trailing gap (write_at past the end of a last piece never written) must exist as zeros.
  if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot write '", path_, "': extending '", temp_path_, "' to ", end_,
                " bytes failed: ", os_reason(err));
  }
  if (::fsync(fd_) != 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot write '", path_, "': fsync of '", temp_path_,
                "' failed: ", os_reason(err));
  }
  const int fd = fd_;
  fd_ = -1;
  // A failed close of a written file can carry a deferred write error on some file systems.
  if (::close(fd) != 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot write '", path_, "': closing '", temp_path_,
                "' failed: ", os_reason(err));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot write '", path_, "': renaming '", temp_path_,
                "' over it failed: ", os_reason(err));
  }
  temp_path_.clear();

  // Make the rename itself durable. Some file systems cannot fsync a directory (EINVAL); the
  // file's data is already synced there, so that case is not an error.
  const std::string dir = parent_dir(path_);
  UniqueFd dir_fd(open_retrying(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0 || (::fsync(dir_fd.get()) != 0 && errno != EINVAL)) {
    const int err = errno;
    PSTAR_THROW(IoError, "wrote '", path_, "' but could not sync its directory '", dir,
                "': ", os_reason(err), "; the file may not survive a crash");
  }
}

}  // namespace pstar::formats
