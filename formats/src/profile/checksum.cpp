// The profile's checksum header (Note [profile checksum] in profile/checksum.h): sealing a written
// profile, checking one before it is read, and reseal_profile.
#include "profile/checksum.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "profile/layout.h"
#include "pstar/base/error.h"
#include "pstar/base/version.h"
#include "pstar/formats/file_guard.h"
#include "pstar/formats/profile.h"

namespace pstar::formats {
namespace profile_detail {
namespace {

std::string header_text(uint32_t crc, uint64_t bytes) {
  char text[kUserBlockBytes] = {};
  std::snprintf(text, sizeof text, "%scrc32 %08x\nbytes %020llu\nversion %.64s\n", kHeaderMagic,
                crc, static_cast<unsigned long long>(bytes), version());
  return std::string(text, sizeof text);
}

// Reads exactly `size` bytes at `offset`; false on a short read or an error (errno set).
bool read_at(int fd, uint64_t offset, char* out, size_t size) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    out += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool write_at(int fd, uint64_t offset, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return true;
}

uint32_t crc32_update(uint32_t crc, const char* data, size_t size) {
  return static_cast<uint32_t>(
      ::crc32(crc, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)));
}

// The CRC-32 of a file of `file_bytes` whose header is `header` (already read), with the header's
// crc digits as '0's. False (errno set) if the file cannot be read.
bool file_crc(int fd, uint64_t file_bytes, std::string header, uint32_t* crc) {
  header.replace(kCrcOffset, kCrcDigits, kCrcDigits, '0');
  uint32_t c = crc32_update(0, header.data(), header.size());
  std::vector<char> buffer(size_t{1} << 20);
  for (uint64_t offset = kUserBlockBytes; offset < file_bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), file_bytes - offset));
    if (!read_at(fd, offset, buffer.data(), n)) return false;
    c = crc32_update(c, buffer.data(), n);
    offset += n;
  }
  *crc = c;
  return true;
}

// Parses `digits` as a number in `base`; false unless every character is a digit of it (lowercase
// hex).
bool parse_digits(const char* digits, size_t count, int base, uint64_t* out) {
  uint64_t value = 0;
  for (size_t i = 0; i < count; ++i) {
    const char ch = digits[i];
    int d = -1;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    if (base == 16 && ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    if (d < 0) return false;
    if (value > (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(d)) /
                    static_cast<uint64_t>(base))
      return false;
    value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
  }
  *out = value;
  return true;
}

std::string crc_text(uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", crc);
  return text;
}

}  // namespace

int seal(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return errno;
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (bytes < kUserBlockBytes) return EINVAL;
  const std::string zero = header_text(0, bytes);
  if (!write_at(fd, 0, zero.data(), zero.size())) return errno;
  uint32_t crc = 0;
  if (!file_crc(fd, bytes, zero, &crc)) return errno;
  const std::string sealed = header_text(crc, bytes);
  if (!write_at(fd, 0, sealed.data(), sealed.size())) return errno;
  return 0;
}

Checksum verify_checksum(const std::string& path, int fd, uint64_t file_bytes) {
  const auto fail = [&](const std::string& what) {
    PSTAR_THROW(FormatError, "profile '", path, "' ", what);
  };
  std::string header(kUserBlockBytes, '\0');
  const size_t have = static_cast<size_t>(std::min<uint64_t>(file_bytes, kUserBlockBytes));
  if (!read_at(fd, 0, header.data(), have)) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot read profile '", path, "': ", std::strerror(err));
  }
  if (header.compare(0, kMagicBytes, kHeaderMagic) != 0) {
    if (have >= 8 && header.compare(0, 8, kHdf5Signature, 8) == 0) return Checksum::kAbsent;
    char signature[8] = {};
    if (file_bytes >= kUserBlockBytes + 8 &&
        read_at(fd, kUserBlockBytes, signature, sizeof signature) &&
        std::memcmp(signature, kHdf5Signature, 8) == 0) {
      fail(
          "has a damaged header: its first 512 bytes are not pstar's checksum header (the "
          "file is corrupt)");
    }
    fail(
        "is not a pstar profile (it starts with neither pstar's checksum header nor the HDF5 "
        "signature); give a file written by `pstar profile` or `pstar train --profile`");
  }
  uint64_t want_crc = 0, want_bytes = 0;
  const bool parsed =
      have == kUserBlockBytes && header.compare(kMagicBytes, sizeof kCrcKey - 1, kCrcKey) == 0 &&
      parse_digits(&header[kCrcOffset], kCrcDigits, 16, &want_crc) &&
      header[kCrcOffset + kCrcDigits] == '\n' &&
      header.compare(kCrcOffset + kCrcDigits + 1, sizeof kBytesKey - 1, kBytesKey) == 0 &&
      parse_digits(&header[kBytesOffset], kBytesDigits, 10, &want_bytes) &&
      header[kBytesOffset + kBytesDigits] == '\n';
  if (!parsed) fail("has a damaged checksum header (the file is corrupt)");
  if (want_bytes != file_bytes) {
    fail(str_cat("is ", file_bytes, " bytes but its header records ", want_bytes,
                 " (the file is truncated, or was changed after pstar wrote it)"));
  }
  uint32_t crc = 0;
  if (!file_crc(fd, file_bytes, header, &crc)) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot read profile '", path, "': ", std::strerror(err));
  }
  if (crc != want_crc) {
    fail(str_cat("is corrupt: its CRC-32 is ", crc_text(crc), " but its header records ",
                 crc_text(static_cast<uint32_t>(want_crc)),
                 " (bytes changed after pstar wrote it; a profile edited through HDF5 must be "
                 "resealed: formats::reseal_profile)"));
  }
  return Checksum::kVerified;
}

}  // namespace profile_detail

using namespace profile_detail;  // the profile's private parts (profile/*.h)

void reseal_profile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot reseal profile '", path, "': ", os_reason(err));
  }
  char magic[kMagicBytes] = {};
  PSTAR_CHECK(read_at(fd.get(), 0, magic, sizeof magic) &&
                  std::memcmp(magic, kHeaderMagic, kMagicBytes) == 0,
              FormatError, "cannot reseal profile '", path,
              "': it has no pstar checksum header to rewrite");
  if (const int err = seal(fd.get()); err != 0) {
    PSTAR_THROW(IoError, "cannot reseal profile '", path, "': ", os_reason(err));
  }
  if (::fsync(fd.get()) != 0) {
    const int err = errno;
    PSTAR_THROW(IoError, "cannot reseal profile '", path, "': fsync failed: ", os_reason(err));
  }
}

}  // namespace pstar::formats
