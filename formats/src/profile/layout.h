// The profile file's HDF5 layout, shared by its writer (profile/write.cpp) and reader
// (profile/read.cpp); private to formats/src/profile*. Both go through HDF5's C++ API: its objects
// close their ids on destruction, and a failed call throws H5::Exception, which the writer turns
// into IoError and the reader into FormatError, naming the file and the object being written or
// read. The checksum header in front of the HDF5 data is profile/checksum.h's.
#pragma once

#include <H5Cpp.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "pstar/formats/profile.h"

namespace pstar::formats::profile_detail {

// Value counts of the enums stored as int8 codes; a new enum value must raise its count here (and
// bump kProfileSchemaVersion, since an older reader rejects the new code).
constexpr int kNumStages = 3;
constexpr int kNumPlaces = 4;
constexpr int kNumEventKinds = 10;

// "name0,name1,...": the attribute that documents an int8 code column inside the file.
template <typename Enum>
std::string code_names(int count) {
  std::string names;
  for (int i = 0; i < count; ++i) {
    if (i > 0) names += ',';
    names += to_string(static_cast<Enum>(i));
  }
  return names;
}

// Index of the first code outside [0, count), or -1.
int64_t first_bad_code(const std::vector<int8_t>& codes, int count);

// Note [profile columns]: each table's columns are listed once, in these visitors, and the
// writer, the length checks and the reader all walk them, so the three cannot disagree. The
// visitor order is the order datasets are written in.
template <typename Run, typename F>
void run_attributes(Run& r, F&& f) {
  f("config_json", r.config_json);
  f("pstar_version", r.pstar_version);
  f("torch_version", r.torch_version);
  f("created", r.created);
  f("precision", r.precision);
  f("chunk_size", r.chunk_size);
  f("num_chunks", r.num_chunks);
  f("compute_bytes_per_chunk", r.compute_bytes_per_chunk);
  f("optimizer_bytes_per_chunk", r.optimizer_bytes_per_chunk);
  f("device_budget", r.device_budget);
  f("host_budget", r.host_budget);
  f("world_size", r.world_size);
  f("rank", r.rank);
  f("warmup_iterations", r.warmup_iterations);
  f("steps", r.steps);
}

template <typename Chunks, typename F>
void chunk_columns(Chunks& c, F&& f) {
  f("id", c.id);
  f("numel", c.numel);
  f("capacity", c.capacity);
  f("group", c.group);
  f("owner", c.owner);
  f("embedding", c.embedding);
  f("payloads", c.payloads);
}

// by_time has no step, moment or name datasets: a clock sample belongs to no moment.
template <typename Memory, typename F>
void memory_columns(Memory& m, bool by_moment, F&& f) {
  if (by_moment) {
    f("step", m.step);
    f("moment", m.moment);
    f("name", m.name);
  }
  f("stage", m.stage);
  f("time_s", m.time_s);
  f("device_total", m.device_total);
  f("device_chunks", m.device_chunks);
  f("device_non_model", m.device_non_model);
  f("host_total", m.host_total);
  f("host_chunks", m.host_chunks);
  f("host_non_model", m.host_non_model);
}

template <typename Events, typename F>
void event_columns(Events& e, F&& f) {
  f("time_s", e.time_s);
  f("step", e.step);
  f("moment", e.moment);
  f("chunk", e.chunk);
  f("kind", e.kind);
  f("bytes", e.bytes);
  f("duration_s", e.duration_s);
}

template <typename Steps, typename F>
void step_columns(Steps& s, F&& f) {
  f("step", s.step);
  f("time_s", s.time_s);
  f("forward_s", s.forward_s);
  f("backward_s", s.backward_s);
  f("optimizer_s", s.optimizer_s);
  f("loss", s.loss);
  f("device_peak_bytes", s.device_peak_bytes);
  f("host_peak_bytes", s.host_peak_bytes);
  f("moved_h2d_bytes", s.moved_h2d_bytes);
  f("moved_d2h_bytes", s.moved_d2h_bytes);
}

// The file and memory types of each numeric column type. Files are little-endian whatever the
// host, so they read the same everywhere.
template <typename T>
struct ColumnType;
template <>
struct ColumnType<int64_t> {
  static const H5::PredType& file() { return H5::PredType::STD_I64LE; }
  static const H5::PredType& memory() { return H5::PredType::NATIVE_INT64; }
  static constexpr const char* kName = "int64";
};
template <>
struct ColumnType<int8_t> {
  static const H5::PredType& file() { return H5::PredType::STD_I8LE; }
  static const H5::PredType& memory() { return H5::PredType::NATIVE_INT8; }
  static constexpr const char* kName = "int8";
};
template <>
struct ColumnType<double> {
  static const H5::PredType& file() { return H5::PredType::IEEE_F64LE; }
  static const H5::PredType& memory() { return H5::PredType::NATIVE_DOUBLE; }
  static constexpr const char* kName = "float64";
};

// Variable-length UTF-8: h5py reads such attributes as str (and datasets with .asstr()), and
// their text lives on the global heap, so a long config_json does not hit the 64 KiB limit on an
// object header.
H5::StrType string_type();

// Serializes the profile's HDF5 calls: Debian's serial libhdf5 is not built thread-safe, and the
// engine may write a profile while another thread reads one.
std::mutex& hdf5_mutex();

std::string join_path(const std::string& group, const std::string& name);

std::string os_reason(int err);

}  // namespace pstar::formats::profile_detail
