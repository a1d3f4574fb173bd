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

}  // namespace pstar::formats
