// The HDF5 profile file (docs/profile.md), through HDF5's C++ API: its objects close their ids on
// destruction, and a failed call throws H5::Exception, which this file turns into IoError (writing)
// or FormatError (reading), naming the file and the object being written or read.
#include "pstar/formats/profile.h"

#include <H5Cpp.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/version.h"
#include "pstar/formats/file_guard.h"

namespace pstar::formats {

// This build has HDF5; profile_absent.cpp stands in for this file in one without.
bool profile_io_built() { return true; }

void require_profile_io(const std::string&) {}

namespace {

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
int64_t first_bad_code(const std::vector<int8_t>& codes, int count) {
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] < 0 || codes[i] >= count) return static_cast<int64_t>(i);
  }
  return -1;
}

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
H5::StrType string_type() {
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(H5T_CSET_UTF8);
  return type;
}

// Serializes this file's HDF5 calls: Debian's serial libhdf5 is not built thread-safe, and the
// engine may write a profile while another thread reads one.
std::mutex& hdf5_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::string join_path(const std::string& group, const std::string& name) {
  return group == "/" ? "/" + name : group + "/" + name;
}

// ---------------------------------------------------------------------------------------------
// Writing

// InternalError unless every column of the table `visit` walks has the same length; returns it.
template <typename Visit>
size_t check_table(const char* table, Visit&& visit) {
  const char* first = nullptr;
  size_t rows = 0;
  visit([&](const char* name, const auto& column) {
    if (first == nullptr) {
      first = name;
      rows = column.size();
      return;
    }
    PSTAR_INTERNAL_ASSERT(column.size() == rows, "write_profile: ", table, "/", name, " has ",
                          column.size(), " rows but ", table, "/", first, " has ", rows);
  });
  return rows;
}

void check_codes(const char* dataset, const std::vector<int8_t>& codes, int count) {
  const int64_t bad = first_bad_code(codes, count);
  PSTAR_INTERNAL_ASSERT(bad < 0, "write_profile: ", dataset, "[", bad, "] is ",
                        bad < 0 ? 0 : static_cast<int>(codes[static_cast<size_t>(bad)]),
                        ", not a code in [0, ", count, ")");
}

void check_profile(const Profile& p) {
  const size_t chunks = check_table("/chunks", [&](auto&& f) { chunk_columns(p.chunks, f); });
  const size_t moments =
      check_table("/memory/by_moment", [&](auto&& f) { memory_columns(p.by_moment, true, f); });
  check_table("/memory/by_time", [&](auto&& f) { memory_columns(p.by_time, false, f); });
  PSTAR_INTERNAL_ASSERT(
      p.by_time.step.empty() && p.by_time.moment.empty() && p.by_time.name.empty(),
      "write_profile: by_time has step/moment/name entries; they belong to "
      "by_moment only");
  check_table("/events", [&](auto&& f) { event_columns(p.events, f); });
  check_table("/steps", [&](auto&& f) { step_columns(p.steps, f); });
  PSTAR_INTERNAL_ASSERT(p.location.size() == moments * chunks, "write_profile: /location has ",
                        p.location.size(), " entries, not ", moments, " moments x ", chunks,
                        " chunks");
  check_codes("/memory/by_moment/stage", p.by_moment.stage, kNumStages);
  check_codes("/memory/by_time/stage", p.by_time.stage, kNumStages);
  check_codes("/events/kind", p.events.kind, kNumEventKinds);
  check_codes("/location", p.location, kNumPlaces);
}

// Chunked and deflate-compressed numeric datasets (the location matrix and the event columns
// repeat a lot); an empty one stays contiguous, since a chunk cannot have a zero dimension.
H5::DSetCreatPropList numeric_layout(int rank, const hsize_t* dims) {
  H5::DSetCreatPropList plist;
  if (std::any_of(dims, dims + rank, [](hsize_t d) { return d == 0; })) return plist;
  if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0) return plist;
  // About 64 Ki elements per chunk: within HDF5's default 1 MiB chunk cache for every type.
  constexpr hsize_t kChunkElements = hsize_t{1} << 16;
  hsize_t chunk[2] = {std::min(dims[0], kChunkElements), 1};
  if (rank == 2) {
    chunk[1] = dims[1];
    chunk[0] = std::min(dims[0], std::max<hsize_t>(1, kChunkElements / dims[1]));
  }
  plist.setChunk(rank, chunk);
  plist.setShuffle();
  plist.setDeflate(1);  // the fastest level: most of the gain, little of the time
  return plist;
}

class Writer {
 public:
  explicit Writer(H5::H5File& file) : file_(file) {}

  // What is being written, for the message if HDF5 fails.
  const std::string& at() const { return at_; }

  H5::Group group(const std::string& path) {
    at_ = path;
    return file_.createGroup(path);
  }

  void attribute(H5::H5Object& object, const std::string& object_path, const char* name,
                 int64_t value) {
    at_ = str_cat("attribute '", name, "' of ", object_path);
    H5::Attribute attr =
        object.createAttribute(name, ColumnType<int64_t>::file(), H5::DataSpace(H5S_SCALAR));
    attr.write(ColumnType<int64_t>::memory(), &value);
  }

  void attribute(H5::H5Object& object, const std::string& object_path, const char* name,
                 const std::string& value) {
    at_ = str_cat("attribute '", name, "' of ", object_path);
    const H5::StrType type = string_type();
    H5::Attribute attr = object.createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
    attr.write(type, value);
  }

  template <typename T>
  H5::DataSet column(H5::Group& group, const std::string& group_path, const char* name,
                     const std::vector<T>& values) {
    const hsize_t dims[1] = {values.size()};
    return numeric(group, join_path(group_path, name), name, 1, dims, values.data());
  }

  H5::DataSet column(H5::Group& group, const std::string& group_path, const char* name,
                     const std::vector<std::string>& values) {
    at_ = join_path(group_path, name);
    const hsize_t dims[1] = {values.size()};
    const H5::StrType type = string_type();
    H5::DataSet dataset = group.createDataSet(name, type, H5::DataSpace(1, dims));
    if (!values.empty()) {
      std::vector<const char*> pointers;
      pointers.reserve(values.size());
      for (const std::string& value : values) pointers.push_back(value.c_str());
      dataset.write(pointers.data(), type);
    }
    return dataset;
  }

  template <typename T>
  H5::DataSet numeric(H5::Group& group, const std::string& path, const char* name, int rank,
                      const hsize_t* dims, const T* data) {
    at_ = path;
    H5::DataSet dataset = group.createDataSet(
        name, ColumnType<T>::file(), H5::DataSpace(rank, dims), numeric_layout(rank, dims));
    hsize_t total = 1;
    for (int i = 0; i < rank; ++i) total *= dims[i];
    if (total > 0) dataset.write(data, ColumnType<T>::memory());
    return dataset;
  }

  template <typename Visit>
  H5::Group table(const std::string& path, Visit&& visit) {
    H5::Group g = group(path);
    visit([&](const char* name, const auto& values) { column(g, path, name, values); });
    return g;
  }

 private:
  H5::H5File& file_;
  std::string at_;
};

void write_contents(Writer& w, H5::H5File& file, const Profile& p) {
  w.attribute(file, "/", "format", std::string(kProfileFormat));
  w.attribute(file, "/", "schema_version", p.run.schema_version);
  run_attributes(p.run,
                 [&](const char* name, const auto& value) { w.attribute(file, "/", name, value); });

  w.table("/chunks", [&](auto&& f) { chunk_columns(p.chunks, f); });

  w.group("/memory");
  H5::Group by_moment =
      w.table("/memory/by_moment", [&](auto&& f) { memory_columns(p.by_moment, true, f); });
  w.attribute(by_moment, "/memory/by_moment", "stages", code_names<ProfileStage>(kNumStages));
  H5::Group by_time =
      w.table("/memory/by_time", [&](auto&& f) { memory_columns(p.by_time, false, f); });
  w.attribute(by_time, "/memory/by_time", "stages", code_names<ProfileStage>(kNumStages));

  H5::Group events = w.table("/events", [&](auto&& f) { event_columns(p.events, f); });
  w.attribute(events, "/events", "kinds", code_names<ChunkEventKind>(kNumEventKinds));

  const hsize_t dims[2] = {p.by_moment.size(), p.chunks.size()};
  H5::Group root = file.openGroup("/");
  H5::DataSet location = w.numeric(root, "/location", "location", 2, dims, p.location.data());
  w.attribute(location, "/location", "places", code_names<ChunkPlace>(kNumPlaces));

  w.table("/steps", [&](auto&& f) { step_columns(p.steps, f); });
}

std::string os_reason(int err) { return std::strerror(err); }

// ---------------------------------------------------------------------------------------------
// The checksum header

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

// Writes the header of the profile open as `fd` (Note [profile checksum]); returns 0 or the errno.
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

enum class Checksum { kVerified, kAbsent };

// Checks the header of the profile open as `fd` before anything else reads it: kVerified, or
// kAbsent for a profile from before checksums (the HDF5 signature at offset 0). FormatError
// naming the file otherwise.
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

// ---------------------------------------------------------------------------------------------
// Reading

const char* type_class_name(H5T_class_t type_class) {
  switch (type_class) {
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "variable-length sequence";
    case H5T_ENUM:
      return "enum";
    default:
      return "other";  // a C enum with internal values; only these matter in a message
  }
}

// "a 4-byte unsigned integer", "a variable-length string": what a message says was found.
std::string describe_type(const H5::DataType& type) {
  const H5T_class_t type_class = type.getClass();
  if (type_class == H5T_STRING) {
    return H5::StrType(type.getId()).isVariableStr() ? "a variable-length string"
                                                     : "a fixed-length string";
  }
  std::string sign;
  if (type_class == H5T_INTEGER) {
    sign = H5::IntType(type.getId()).getSign() == H5T_SGN_NONE ? "unsigned " : "signed ";
  }
  return str_cat("a ", type.getSize(), "-byte ", sign, type_class_name(type_class));
}

// Frees the strings HDF5 allocates when it reads variable-length strings.
class VlenStrings {
 public:
  VlenStrings(size_t n, const H5::DataType& type, const H5::DataSpace& space)
      : pointers_(n, nullptr), type_(type), space_(space) {}
  ~VlenStrings() {
    if (!pointers_.empty()) H5Dvlen_reclaim(type_.getId(), space_.getId(), H5P_DEFAULT, data());
  }
  VlenStrings(const VlenStrings&) = delete;
  VlenStrings& operator=(const VlenStrings&) = delete;
  char** data() { return pointers_.data(); }
  const std::vector<char*>& pointers() const { return pointers_; }

 private:
  std::vector<char*> pointers_;
  H5::DataType type_;
  H5::DataSpace space_;
};

// Deflate, the one filter pstar writes, inflates at most 1032:1 (the zlib technical details).
constexpr uint64_t kMaxInflation = 1032;

class Reader {
 public:
  Reader(std::string path, H5::H5File& file, uint64_t file_bytes)
      : path_(std::move(path)), file_(file), file_bytes_(file_bytes) {}

  const std::string& at() const { return at_; }

  [[noreturn]] void fail(const std::string& what) const {
    PSTAR_THROW(FormatError, "profile '", path_, "': ", what);
  }

  // `path` is absolute, e.g. "/memory/by_moment"; each level is checked, so a message names the
  // first one missing.
  H5::Group group(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    H5::Group parent_group = slash == 0 ? file_.openGroup("/") : group(path.substr(0, slash));
    at_ = path;
    const std::string name = path.substr(slash + 1);
    if (!parent_group.nameExists(name) || parent_group.childObjType(name) != H5O_TYPE_GROUP) {
      fail(str_cat("group ", path, " is missing; the file is not a complete pstar profile"));
    }
    return parent_group.openGroup(name);
  }

  H5::DataSet dataset(const H5::Group& group, const std::string& path, const char* name) {
    at_ = path;
    if (!group.nameExists(name) || group.childObjType(name) != H5O_TYPE_DATASET) {
      fail(str_cat("dataset ", path, " is missing; the file is not a complete pstar profile"));
    }
    return group.openDataSet(name);
  }

  // The dataset's dimensions, after checking its rank.
  std::vector<hsize_t> shape(const H5::DataSet& dataset, const std::string& path, int rank) {
    const H5::DataSpace space = dataset.getSpace();
    const int found = space.getSimpleExtentType() == H5S_SIMPLE ? space.getSimpleExtentNdims() : 0;
    if (found != rank) {
      fail(str_cat("dataset ", path, " has ", found, " dimension(s), expected ", rank));
    }
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    space.getSimpleExtentDims(dims.data());
    return dims;
  }

  // The number of elements `dims` holds, after checking that the file can hold them: a corrupt
  // dataspace claims any size, and reading allocates `element_bytes` per element before HDF5 looks
  // at the data. pstar writes every element (no fill values), so the dataset's storage must be in
  // the file and inflate to at least the elements' bytes.
  size_t checked_count(const H5::DataSet& dataset, const std::string& path,
                       const std::vector<hsize_t>& dims, size_t element_bytes) {
    uint64_t count = 1;
    for (hsize_t d : dims) {
      if (d != 0 && count > std::numeric_limits<uint64_t>::max() / element_bytes / d) {
        fail(str_cat("dataset ", path, " has shape ", shape_text(dims),
                     ", more elements than memory can hold; the file is corrupt"));
      }
      count *= d;
    }
    if (count == 0) return 0;
    const uint64_t stored = dataset.getStorageSize();
    if (stored > file_bytes_ || count * element_bytes / kMaxInflation > stored) {
      fail(str_cat("dataset ", path, " claims ", count, " elements (shape ", shape_text(dims),
                   ") but stores ", stored, " bytes in a ", file_bytes_,
                   "-byte file; the file is truncated or corrupt"));
    }
    return static_cast<size_t>(count);
  }

  template <typename T>
  void check_numeric_type(const H5::DataType& type, const std::string& what) {
    constexpr H5T_class_t kClass = std::is_floating_point_v<T> ? H5T_FLOAT : H5T_INTEGER;
    const bool ok = type.getClass() == kClass && type.getSize() == sizeof(T) &&
                    (kClass != H5T_INTEGER || H5::IntType(type.getId()).getSign() == H5T_SGN_2);
    if (!ok) {
      fail(str_cat(what, " holds ", describe_type(type), ", expected ", ColumnType<T>::kName));
    }
  }

  void check_string_type(const H5::DataType& type, const std::string& what) {
    if (type.getClass() != H5T_STRING || !H5::StrType(type.getId()).isVariableStr()) {
      fail(str_cat(what, " holds ", describe_type(type), ", expected a variable-length string"));
    }
  }

  // Reads a rank-`rank` numeric dataset whose shape `dims` returns.
  template <typename T>
  std::vector<T> numeric(const H5::Group& group, const std::string& path, const char* name,
                         int rank, std::vector<hsize_t>* dims) {
    H5::DataSet dataset = this->dataset(group, path, name);
    check_numeric_type<T>(dataset.getDataType(), "dataset " + path);
    *dims = shape(dataset, path, rank);
    const size_t total = checked_count(dataset, path, *dims, sizeof(T));
    std::vector<T> values(total);
    if (total > 0) dataset.read(values.data(), ColumnType<T>::memory());
    return values;
  }

  template <typename T>
  void column(const H5::Group& group, const std::string& group_path, const char* name,
              std::vector<T>* out) {
    std::vector<hsize_t> dims;
    *out = numeric<T>(group, join_path(group_path, name), name, 1, &dims);
  }

  void column(const H5::Group& group, const std::string& group_path, const char* name,
              std::vector<std::string>* out) {
    const std::string path = join_path(group_path, name);
    H5::DataSet dataset = this->dataset(group, path, name);
    check_string_type(dataset.getDataType(), "dataset " + path);
    const size_t n = checked_count(dataset, path, shape(dataset, path, 1), sizeof(char*));
    out->clear();
    if (n == 0) return;
    const H5::StrType type = string_type();
    const H5::DataSpace space = dataset.getSpace();
    VlenStrings strings(n, type, space);
    dataset.read(strings.data(), type);
    out->reserve(n);
    for (const char* s : strings.pointers()) out->emplace_back(s == nullptr ? "" : s);
  }

  // Reads every column `visit` walks, then checks they have one length.
  template <typename Visit>
  H5::Group table(const std::string& path, Visit&& visit) {
    H5::Group g = group(path);
    const char* first = nullptr;
    size_t rows = 0;
    visit([&](const char* name, auto& values) {
      column(g, path, name, &values);
      if (first == nullptr) {
        first = name;
        rows = values.size();
      } else if (values.size() != rows) {
        fail(str_cat(join_path(path, name), " has ", values.size(), " rows but ",
                     join_path(path, first), " has ", rows,
                     "; every column of a table has one entry per row"));
      }
    });
    return g;
  }

  H5::Attribute attribute(const H5::H5Object& object, const std::string& object_path,
                          const char* name) {
    at_ = str_cat("attribute '", name, "' of ", object_path);
    if (!object.attrExists(name)) fail(at_ + " is missing");
    H5::Attribute attr = object.openAttribute(name);
    if (attr.getSpace().getSimpleExtentNpoints() != 1) fail(at_ + " is not a single value");
    return attr;
  }

  void attribute(const H5::H5Object& object, const std::string& object_path, const char* name,
                 int64_t* out) {
    H5::Attribute attr = attribute(object, object_path, name);
    check_numeric_type<int64_t>(attr.getDataType(), at_);
    attr.read(ColumnType<int64_t>::memory(), out);
  }

  void attribute(const H5::H5Object& object, const std::string& object_path, const char* name,
                 std::string* out) {
    H5::Attribute attr = attribute(object, object_path, name);
    check_string_type(attr.getDataType(), at_);
    attr.read(string_type(), *out);
  }

  // A code-name attribute must list exactly this build's names: the codes mean nothing otherwise.
  void check_code_names(const H5::H5Object& object, const std::string& object_path,
                        const char* name, const std::string& expected) {
    std::string found;
    attribute(object, object_path, name, &found);
    // Codes are only ever added at the end: a file from an older pstar names fewer of them.
    const bool older = !found.empty() && expected.rfind(found + ",", 0) == 0;
    if (found != expected && !older) {
      fail(str_cat(at_, " is '", found, "', expected '", expected,
                   "'; the file's codes differ from this pstar's"));
    }
  }

  void check_codes(const std::string& path, const std::vector<int8_t>& codes, int count,
                   const char* what) {
    const int64_t bad = first_bad_code(codes, count);
    if (bad >= 0) {
      fail(str_cat(path, "[", bad, "] is ", static_cast<int>(codes[static_cast<size_t>(bad)]),
                   ", not a ", what, " code (0 to ", count - 1, ")"));
    }
  }

 private:
  static std::string shape_text(const std::vector<hsize_t>& dims) {
    std::string text = "[";
    for (size_t i = 0; i < dims.size(); ++i) text += str_cat(i > 0 ? ", " : "", dims[i]);
    return text + "]";
  }

  std::string path_;
  H5::H5File& file_;
  uint64_t file_bytes_;
  std::string at_;
};

Profile read_contents(Reader& r, H5::H5File& file) {
  Profile p;
  // The format marker and the version come first: a newer file may differ in everything else.
  if (!file.attrExists("format")) {
    r.fail("root attribute 'format' is missing; this is an HDF5 file but not a pstar profile");
  }
  std::string format;
  r.attribute(file, "/", "format", &format);
  if (format != kProfileFormat) {
    r.fail(str_cat("root attribute 'format' is '", format, "', expected '", kProfileFormat,
                   "'; this is an HDF5 file but not a pstar profile"));
  }
  r.attribute(file, "/", "schema_version", &p.run.schema_version);
  if (p.run.schema_version > kProfileSchemaVersion) {
    r.fail(str_cat("written by a newer pstar (schema ", p.run.schema_version,
                   "); this pstar reads schema ", kProfileSchemaVersion,
                   "; read it with a newer pstar"));
  }
  if (p.run.schema_version < 1) {
    r.fail(str_cat("root attribute 'schema_version' is ", p.run.schema_version,
                   ", not a valid schema (1 or more)"));
  }
  run_attributes(p.run,
                 [&](const char* name, auto& value) { r.attribute(file, "/", name, &value); });

  r.table("/chunks", [&](auto&& f) { chunk_columns(p.chunks, f); });

  H5::Group by_moment =
      r.table("/memory/by_moment", [&](auto&& f) { memory_columns(p.by_moment, true, f); });
  r.check_code_names(by_moment, "/memory/by_moment", "stages",
                     code_names<ProfileStage>(kNumStages));
  H5::Group by_time =
      r.table("/memory/by_time", [&](auto&& f) { memory_columns(p.by_time, false, f); });
  r.check_code_names(by_time, "/memory/by_time", "stages", code_names<ProfileStage>(kNumStages));

  H5::Group events = r.table("/events", [&](auto&& f) { event_columns(p.events, f); });
  r.check_code_names(events, "/events", "kinds", code_names<ChunkEventKind>(kNumEventKinds));

  std::vector<hsize_t> dims;
  H5::Group root = file.openGroup("/");
  p.location = r.numeric<int8_t>(root, "/location", "location", 2, &dims);
  if (dims[0] != p.by_moment.size() || dims[1] != p.chunks.size()) {
    r.fail(str_cat("/location has shape [", dims[0], ", ", dims[1], "], expected [",
                   p.by_moment.size(), ", ", p.chunks.size(),
                   "] (rows of /memory/by_moment x rows of /chunks)"));
  }
  r.check_code_names(r.dataset(root, "/location", "location"), "/location", "places",
                     code_names<ChunkPlace>(kNumPlaces));

  r.table("/steps", [&](auto&& f) { step_columns(p.steps, f); });

  r.check_codes("/memory/by_moment/stage", p.by_moment.stage, kNumStages, "stage");
  r.check_codes("/memory/by_time/stage", p.by_time.stage, kNumStages, "stage");
  r.check_codes("/events/kind", p.events.kind, kNumEventKinds, "chunk event kind");
  r.check_codes("/location", p.location, kNumPlaces, "chunk place");
  return p;
}

}  // namespace

void write_profile(const std::string& path, const Profile& profile) {
  check_profile(profile);
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  H5::Exception::dontPrint();  // pstar reports HDF5 failures in its own messages

  // Built under a temporary name beside `path` and published by rename (Note [publish by rename]),
  // so a crash never leaves a half-written profile under the real name.
  TempPath temp(path);
  {
    // Created by hand first so that a missing or read-only directory gives the OS's reason.
    UniqueFd fd(::open(temp.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
    if (fd.get() < 0) {
      const int err = errno;
      PSTAR_THROW(IoError, "cannot write profile '", path, "': cannot create '", temp.path(),
                  "': ", os_reason(err), "; check that the directory exists and is writable");
    }
  }
  std::string at = "the file";
  try {
    H5::FileCreatPropList create;
    create.setUserblock(kUserBlockBytes);  // the checksum header's room (Note [profile checksum])
    H5::H5File file(temp.path(), H5F_ACC_TRUNC, create);
    Writer writer(file);
    try {
      write_contents(writer, file, profile);
    } catch (const H5::Exception&) {
      at = writer.at();
      throw;
    }
    at = "the file (closing it)";
    file.close();
  } catch (const H5::Exception& e) {
    PSTAR_THROW(IoError, "cannot write profile '", path, "': writing ", at, " to '", temp.path(),
                "' failed (", e.getFuncName(), ": ", e.getDetailMsg(),
                "); check free space and file size limits");
  }
  {
    UniqueFd fd(::open(temp.path().c_str(), O_RDWR | O_CLOEXEC));
    const int err = fd.get() < 0 ? errno : seal(fd.get());
    if (err != 0) {
      PSTAR_THROW(IoError, "cannot write profile '", path, "': writing the checksum header of '",
                  temp.path(), "' failed: ", os_reason(err));
    }
  }
  temp.publish("profile");
}

Profile read_profile(const std::string& path) {
  uint64_t file_bytes = 0;
  Checksum checksum = Checksum::kAbsent;
  {
    // Checked before HDF5 sees the file, so that only a malformed file gives a FormatError, and
    // a damaged one never reaches libhdf5's parser (Note [profile checksum]).
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      const int err = errno;
      PSTAR_THROW(IoError, "cannot open profile '", path, "': ", os_reason(err),
                  "; check that the file exists and is readable");
    }
    struct stat st;
    PSTAR_CHECK(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), IoError,
                "cannot read profile '", path, "': it is not a regular file");
    file_bytes = static_cast<uint64_t>(st.st_size);
    checksum = verify_checksum(path, fd.get(), file_bytes);
  }
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  H5::Exception::dontPrint();
  std::string at = "the file";
  try {
    PSTAR_CHECK(H5::H5File::isHdf5(path), FormatError, "profile '", path,
                "' is not an HDF5 file; give a file written by `pstar profile` or "
                "`pstar train --profile`");
    H5::H5File file(path, H5F_ACC_RDONLY);
    Reader reader(path, file, file_bytes);
    try {
      Profile p = read_contents(reader, file);
      p.checksummed = checksum == Checksum::kVerified;
      return p;
    } catch (const H5::Exception&) {
      at = reader.at();
      throw;
    }
  } catch (const H5::Exception& e) {
    PSTAR_THROW(FormatError, "profile '", path, "': cannot read ", at, " (", e.getFuncName(), ": ",
                e.getDetailMsg(), "); the file is truncated or corrupt");
  }
}

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
