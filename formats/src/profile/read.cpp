// Reading the HDF5 profile file (docs/profile.md): the checksum header checked before libhdf5 sees
// the file (Note [profile checksum]), then every group, dataset, type, shape and code checked as
// Note [profile columns] lists them, a failed HDF5 call turned into a FormatError naming the object
// being read.
#include <H5Cpp.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "profile/checksum.h"
#include "profile/layout.h"
#include "pstar/base/error.h"
#include "pstar/formats/file_guard.h"
#include "pstar/formats/profile.h"

namespace pstar::formats {
namespace {

using namespace profile_detail;  // the profile's private parts (profile/*.h)

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

  H5::Group chunks = r.table("/chunks", [&](auto&& f) { chunk_columns(p.chunks, f); });
  // Optional: a file from a pstar before it has none (ProfileChunks::tensors).
  if (chunks.nameExists("tensors")) {
    r.column(chunks, "/chunks", "tensors", &p.chunks.tensors);
    if (p.chunks.tensors.size() != p.chunks.size()) {
      r.fail(str_cat("/chunks/tensors has ", p.chunks.tensors.size(), " rows but /chunks/id has ",
                     p.chunks.size(), "; every column of a table has one entry per row"));
    }
  }

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

}  // namespace pstar::formats
