// A read-only memory map of a whole file, owned RAII-style.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pstar::formats {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws IoError naming the path and the OS reason when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset() noexcept;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename,
// then fsync of the directory. A crash at any point leaves either the old file or the new one.
void write_file_atomic(const std::string& path, const void* bytes, size_t size);

// write_file_atomic for a file produced piece by piece, so that it never has to be in memory
// whole: the pieces go to a temporary file in the destination's directory, and commit() syncs it
// and renames it over `path`. Destroyed without commit() (an error on the way), it removes the
// temporary and `path` is untouched. IoError naming `path` on any failure.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // At `offset` (pwrite): pieces may come in any order; a gap reads as zeros.
  void write_at(uint64_t offset, const void* bytes, size_t size);
  // After the end of what was written so far.
  void append(const void* bytes, size_t size);
  uint64_t size_bytes() const { return end_; }
  // Publishes the file under `path`; nothing may be written afterwards.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, temp_path_;
  int fd_ = -1;
  uint64_t end_ = 0;
};

}  // namespace pstar::formats
