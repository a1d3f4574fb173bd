// The profile's checksum header (Note [profile checksum]): written by profile/write.cpp, checked by
// profile/read.cpp before libhdf5 opens the file, rewritten by reseal_profile
// (profile/checksum.cpp). Private to formats/src/profile*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pstar::formats::profile_detail {

// Note [profile checksum]
// libhdf5 (1.10) parses what a file claims before it can check anything, and some corrupt files
// crash it (heap overflows, endless loops: docs/fuzzing.md). So a profile carries its own
// checksum, checked before libhdf5 opens the file: HDF5's user block, the first 512 bytes, which
// HDF5 reserves for the application and every HDF5 reader (h5py, h5dump) skips, holds this text,
// NUL-padded:
//
//   pstar-profile\n
//   crc32 89abcdef\n                  8 lowercase hex digits, at offset 20
//   bytes 00000000000000123456\n      the file's size, 20 decimal digits
//   version 0.1.0\n                   the pstar that wrote it
//
// The CRC-32 (zlib's) covers the whole file, the header included, with its own 8 digits read as
// '0's. write_profile fills the header after libhdf5 has closed the file, before the file is
// synced and renamed into place.
constexpr size_t kUserBlockBytes = 512;  // HDF5's smallest user block
constexpr char kHeaderMagic[] = "pstar-profile\n";
constexpr size_t kMagicBytes = sizeof kHeaderMagic - 1;  // 14
constexpr char kCrcKey[] = "crc32 ";
constexpr size_t kCrcOffset = kMagicBytes + sizeof kCrcKey - 1;  // 20
constexpr size_t kCrcDigits = 8;
constexpr char kBytesKey[] = "bytes ";
constexpr size_t kBytesOffset = kCrcOffset + kCrcDigits + 1 + sizeof kBytesKey - 1;  // 35
constexpr size_t kBytesDigits = 20;
constexpr char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";

// Writes the header of the profile open as `fd` (Note [profile checksum]); returns 0 or the errno.
int seal(int fd);

enum class Checksum { kVerified, kAbsent };

// Checks the header of the profile open as `fd` before anything else reads it: kVerified, or
// kAbsent for a profile from before checksums (the HDF5 signature at offset 0). FormatError
// naming the file otherwise.
Checksum verify_checksum(const std::string& path, int fd, uint64_t file_bytes);

}  // namespace pstar::formats::profile_detail
