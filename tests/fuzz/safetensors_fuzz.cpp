// Fuzz target: the safetensors reader (pstar::formats::SafetensorsReader). The input is the file.
//
// Beyond "only FormatError or IoError, naming the file": every tensor the reader accepts lies
// inside the file (all its bytes are read here, so one outside the mapping faults), its size
// matches its shape, find() returns it, and the tensors and metadata written back by
// SafetensorsWriter read back the same.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "pstar/formats/safetensors.h"

namespace {

using pstar::str_cat;
using pstar::formats::SafetensorsReader;
using pstar::formats::TensorInfo;

void check_same(const SafetensorsReader& a, const SafetensorsReader& b) {
  if (a.tensors().size() != b.tensors().size() || a.metadata() != b.metadata()) {
    pstar::fuzz::finding("the written-back file holds other tensors or metadata");
  }
  for (const TensorInfo& info : a.tensors()) {
    const TensorInfo* other = b.find(info.name);
    if (other == nullptr || other->dtype != info.dtype || other->shape != info.shape ||
        other->size_bytes != info.size_bytes ||
        (info.size_bytes > 0 && std::memcmp(a.data(info), b.data(*other), info.size_bytes) != 0)) {
      pstar::fuzz::finding(str_cat("tensor '", info.name, "' differs once written back"));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstar;
  static fuzz::MemFile file("safetensors");
  static fuzz::MemFile copy("safetensors-copy");
  const std::string& path = file.write(data, size);
  fuzz::expect_typed_errors(path, {ErrorKind::kFormat, ErrorKind::kIo}, [&] {
    const SafetensorsReader reader(path);
    uint64_t total_bytes = 0;
    for (const TensorInfo& info : reader.tensors()) {
      if (reader.find(info.name) != &info) {
        fuzz::finding(str_cat("find('", info.name, "') does not return the tensor"));
      }
      if (static_cast<uint64_t>(info.numel()) * formats::dtype_size(info.dtype) !=
          info.size_bytes) {
        fuzz::finding(str_cat("tensor '", info.name, "' size does not match its shape"));
      }
      total_bytes += info.size_bytes;
      if (total_bytes > size) fuzz::finding("the tensors hold more bytes than the file");
      const uint8_t* bytes = reader.data(info);
      // A volatile sum, so that every byte is really loaded.
      volatile uint8_t sum = 0;
      for (uint64_t i = 0; i < info.size_bytes; ++i) sum = sum + bytes[i];
    }

    std::vector<uint8_t> written;
    try {
      formats::SafetensorsWriter writer;
      for (const TensorInfo& info : reader.tensors()) {
        writer.add(info.name, info.dtype, info.shape, reader.data(info), info.size_bytes);
      }
      for (const auto& [key, value] : reader.metadata()) writer.set_metadata(key, value);
      written = writer.serialize();
    } catch (const Error& e) {
      fuzz::finding(str_cat("what the reader accepted cannot be written back: ", e.what()));
    }
    const std::string& copy_path = copy.write(written.data(), written.size());
    try {
      check_same(reader, SafetensorsReader(copy_path));
    } catch (const Error& e) {
      fuzz::finding(str_cat("the written-back file does not read: ", e.what()));
    }
  });
  return 0;
}
