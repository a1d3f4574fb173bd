// The disk's own bandwidth, the bound the NVMe benchmarks compare against: one file opened with
// O_DIRECT, written and read sequentially by a plain loop of large pwrite/pread calls.
#pragma once

#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/nvme/aligned_buffer.h"

namespace pstar::bench {

using nvme::AlignedBuffer;

// The bound: one O_DIRECT file, a plain loop of slot-sized pwrite/pread calls.
class RawFile {
 public:
  RawFile(const std::string& dir, int64_t bytes)
      : path_(dir + "/pstar-bench-raw-" + std::to_string(::getpid())) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    PSTAR_CHECK(fd_ >= 0, IoError, "cannot open ", path_, " with O_DIRECT: ", std::strerror(errno));
    PSTAR_CHECK(::fallocate(fd_, 0, 0, bytes) == 0, IoError, "cannot allocate ", bytes,
                " bytes for ", path_, ": ", std::strerror(errno));
  }
  ~RawFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  void write_all(const std::vector<AlignedBuffer>& bufs) const {
    int64_t offset = 0;
    for (const AlignedBuffer& b : bufs) {
      transfer(true, b, offset);
      offset += b.capacity();
    }
  }
  void read_all(const std::vector<AlignedBuffer>& bufs) const {
    int64_t offset = 0;
    for (const AlignedBuffer& b : bufs) {
      transfer(false, b, offset);
      offset += b.capacity();
    }
  }

 private:
  void transfer(bool write, const AlignedBuffer& b, int64_t offset) const {
    int64_t done = 0;
    while (done < b.capacity()) {
      char* p = b.as<char>() + done;
      const auto n = static_cast<size_t>(b.capacity() - done);
      const ssize_t r =
          write ? ::pwrite(fd_, p, n, offset + done) : ::pread(fd_, p, n, offset + done);
      PSTAR_CHECK(r > 0, IoError, write ? "pwrite " : "pread ", path_, ": ",
                  r == 0 ? "end of file" : std::strerror(errno));
      done += r;
    }
  }
  std::string path_;
  int fd_ = -1;
};

// The file system `dir` is on, by name where known.
inline std::string fs_name(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x01021994:
      return "tmpfs";
    case 0x794c7630:
      return "overlayfs";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(s.f_type));
      return hex;
    }
  }
}

}  // namespace pstar::bench
