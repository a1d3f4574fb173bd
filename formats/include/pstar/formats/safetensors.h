// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON header
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the
// raw little-endian tensor bytes. The reader validates every offset and length before use.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pstar/formats/mapped_file.h"

namespace pstar::formats {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kU16, kU32, kU64 };

// "F32", "BF16", ...: the names the format uses.
const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin_bytes;  // offset into the data section
  uint64_t size_bytes;
  int64_t numel() const;
};

class SafetensorsReader {
 public:
  // Maps and validates the file. Throws IoError if unreadable, FormatError naming the file (and
  // the tensor, where one is at fault) if malformed.
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // In file order of their data offsets.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorInfo* find(const std::string& name) const;
  // The tensor's bytes (size_bytes of them), inside the mapping; valid while the reader lives.
  // The format packs tensors with no padding, so the pointer may be unaligned for the dtype:
  // copy with memcpy rather than casting it.
  const uint8_t* data(const TensorInfo& info) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> by_name_;  // name -> index into tensors_
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  // Copies the bytes; size must equal numel(shape) × dtype_size. Names must be unique.
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
           const void* bytes, size_t size_bytes);
  void set_metadata(const std::string& key, const std::string& value);
  // The whole file's bytes.
  std::vector<uint8_t> serialize() const;
  // Writes atomically (write_file_atomic).
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace pstar::formats
