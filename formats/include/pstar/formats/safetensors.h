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

// A safetensors file assembled one tensor at a time, for files larger than memory: every name,
// dtype and shape is given up front (the header precedes the data), then each tensor's bytes are
// written to their place, in any order. The layout is SafetensorsWriter's (sorted by name), so the
// same tensors give the same bytes. Atomic like write_file_atomic: the file appears only on
// commit(), and a writer destroyed before that (an error on the way) leaves nothing behind.
class SafetensorsStreamWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  // Checks the entries as SafetensorsWriter::add does (ConfigError) and writes the header.
  SafetensorsStreamWriter(const std::string& path, const std::vector<Entry>& entries,
                          const std::map<std::string, std::string>& metadata = {});
  // Each tensor exactly once; `size_bytes` must be its shape's. ConfigError naming the tensor
  // otherwise.
  void write(const std::string& name, const void* bytes, size_t size_bytes);
  // ConfigError naming a tensor never written.
  void commit();
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  struct Slot {
    uint64_t offset = 0;  // in the file
    uint64_t size_bytes = 0;
    bool written = false;
  };
  AtomicFileWriter file_;
  std::map<std::string, Slot> slots_;
  uint64_t file_bytes_ = 0;
};

}  // namespace pstar::formats
