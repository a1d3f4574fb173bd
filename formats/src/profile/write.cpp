// Writing the HDF5 profile file (docs/profile.md): every column checked, each table written as
// Note [profile columns] lists it, a failed HDF5 call turned into an IoError naming the object
// being written, the checksum header sealed (Note [profile checksum]) and the file published by
// rename.
#include <H5Cpp.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

#include "profile/checksum.h"
#include "profile/layout.h"
#include "pstar/base/error.h"
#include "pstar/formats/file_guard.h"
#include "pstar/formats/profile.h"

namespace pstar::formats {
namespace {

using namespace profile_detail;  // the profile's private parts (profile/*.h)

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
  PSTAR_INTERNAL_ASSERT(p.chunks.tensors.empty() || p.chunks.tensors.size() == chunks,
                        "write_profile: /chunks/tensors has ", p.chunks.tensors.size(),
                        " rows but /chunks/id has ", chunks, " (it is all rows or none)");
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

  H5::Group chunks = w.table("/chunks", [&](auto&& f) { chunk_columns(p.chunks, f); });
  if (!p.chunks.tensors.empty()) w.column(chunks, "/chunks", "tensors", p.chunks.tensors);

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

}  // namespace pstar::formats
