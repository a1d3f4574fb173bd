// Fuzz target: the HDF5 profile reader (pstar::formats::read_profile).
//
// Two input classes (docs/fuzzing.md):
//  - A tamper script (the default). The input's bytes choose a small profile, which write_profile
//    writes, then up to eight edits made through HDF5's own API: objects deleted or replaced by
//    datasets of other types, ranks and shapes (including huge ones that are never written),
//    attributes deleted or replaced, codes out of range. The file is valid HDF5 whose pstar
//    contents are wrong in every way the reader must catch: this exercises pstar's own checks.
//    Inputs that start with the HDF5 signature are raw files, refused (return -1) in this mode.
//  - The file's raw bytes, with PSTAR_FUZZ_PROFILE_RAW=1. Mutated raw bytes mostly exercise
//    libhdf5's own parser, which crashes on them within minutes (1.10.8: not pstar's code, not
//    instrumented; docs/fuzzing.md lists what was found). Profiles now carry a checksum that the
//    reader checks first (Note [profile checksum] in formats/src/profile/checksum.h), so a mutated
//    profile stops there; raw seeds without the header (profiles from before checksums) still
//    reach libhdf5. So ctest only replays the raw seeds in this mode, and fuzzes tamper scripts;
//    longer raw campaigns are run by hand.
//
// Beyond "only FormatError or IoError, naming the file": a profile the reader accepts must be one
// the writer accepts too (write_profile checks the same invariants), and must read back the same.
#include <H5Cpp.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "fuzz_util.h"
#include "pstar/formats/profile.h"

namespace {

using pstar::str_cat;
using pstar::formats::Profile;

constexpr char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";

// Byte equality, so that NaNs read back as NaNs compare equal.
template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  if constexpr (std::is_arithmetic_v<T>) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
  } else {
    return a == b;
  }
}

bool same(const Profile& a, const Profile& b) {
  const auto& r = a.run;
  const auto& s = b.run;
  bool ok = r.schema_version == s.schema_version && r.config_json == s.config_json &&
            r.pstar_version == s.pstar_version && r.torch_version == s.torch_version &&
            r.created == s.created && r.precision == s.precision && r.chunk_size == s.chunk_size &&
            r.num_chunks == s.num_chunks && r.steps == s.steps && r.world_size == s.world_size &&
            r.rank == s.rank;
  ok = ok && same(a.chunks.id, b.chunks.id) && same(a.chunks.payloads, b.chunks.payloads) &&
       same(a.chunks.embedding, b.chunks.embedding) && same(a.chunks.tensors, b.chunks.tensors);
  ok = ok && same(a.by_moment.name, b.by_moment.name) &&
       same(a.by_moment.time_s, b.by_moment.time_s) && same(a.by_time.stage, b.by_time.stage);
  ok = ok && same(a.events.kind, b.events.kind) && same(a.events.bytes, b.events.bytes);
  ok = ok && same(a.location, b.location) && same(a.steps.loss, b.steps.loss);
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Tamper scripts

// Every object of a profile file (docs/profile.md), for the edits to pick from.
const char* const kObjects[] = {
    "/chunks",
    "/chunks/id",
    "/chunks/numel",
    "/chunks/capacity",
    "/chunks/group",
    "/chunks/owner",
    "/chunks/embedding",
    "/chunks/payloads",
    "/chunks/tensors",
    "/memory",
    "/memory/by_moment",
    "/memory/by_moment/step",
    "/memory/by_moment/moment",
    "/memory/by_moment/name",
    "/memory/by_moment/stage",
    "/memory/by_moment/time_s",
    "/memory/by_moment/device_total",
    "/memory/by_moment/host_non_model",
    "/memory/by_time",
    "/memory/by_time/stage",
    "/memory/by_time/time_s",
    "/memory/by_time/host_total",
    "/events",
    "/events/time_s",
    "/events/step",
    "/events/moment",
    "/events/chunk",
    "/events/kind",
    "/events/bytes",
    "/events/duration_s",
    "/location",
    "/steps",
    "/steps/step",
    "/steps/loss",
    "/steps/moved_d2h_bytes",
};
// Attributes, as (object, name).
const char* const kAttributes[][2] = {
    {"/", "format"},
    {"/", "schema_version"},
    {"/", "config_json"},
    {"/", "precision"},
    {"/", "chunk_size"},
    {"/", "steps"},
    {"/", "rank"},
    {"/memory/by_moment", "stages"},
    {"/memory/by_time", "stages"},
    {"/events", "kinds"},
    {"/location", "places"},
};

template <typename T>
std::vector<T> values(FuzzedDataProvider& in, size_t n) {
  std::vector<T> out(n);
  for (T& v : out) {
    if constexpr (std::is_floating_point_v<T>) {
      v = in.ConsumeFloatingPoint<T>();
    } else {
      v = in.ConsumeIntegral<T>();
    }
  }
  return out;
}

std::vector<int8_t> codes(FuzzedDataProvider& in, size_t n, int count) {
  std::vector<int8_t> out(n);
  for (int8_t& c : out) c = in.ConsumeIntegralInRange<int8_t>(0, static_cast<int8_t>(count - 1));
  return out;
}

std::vector<std::string> strings(FuzzedDataProvider& in, size_t n) {
  std::vector<std::string> out(n);
  for (std::string& s : out) s = in.ConsumeRandomLengthString(16);
  return out;
}

// A small valid profile: up to 4 chunks, moments, clock samples, events and steps.
Profile small_profile(FuzzedDataProvider& in) {
  Profile p;
  p.run.config_json = in.ConsumeRandomLengthString(32);
  p.run.precision = in.ConsumeRandomLengthString(8);
  p.run.chunk_size = in.ConsumeIntegral<int64_t>();
  p.run.steps = in.ConsumeIntegral<int64_t>();
  const size_t chunks = in.ConsumeIntegralInRange<size_t>(0, 4);
  const size_t moments = in.ConsumeIntegralInRange<size_t>(0, 4);
  const size_t samples = in.ConsumeIntegralInRange<size_t>(0, 3);
  const size_t events = in.ConsumeIntegralInRange<size_t>(0, 4);
  const size_t steps = in.ConsumeIntegralInRange<size_t>(0, 3);
  auto& c = p.chunks;
  c.id = c.numel = c.capacity = c.group = c.owner = values<int64_t>(in, chunks);
  c.embedding = codes(in, chunks, 2);
  c.payloads = strings(in, chunks);
  for (auto* m : {&p.by_moment, &p.by_time}) {
    const size_t n = m == &p.by_moment ? moments : samples;
    if (m == &p.by_moment) {
      m->step = m->moment = values<int64_t>(in, n);
      m->name = strings(in, n);
    }
    m->stage = codes(in, n, 3);
    m->time_s = values<double>(in, n);
    m->device_total = m->device_chunks = m->device_non_model = m->host_total = m->host_chunks =
        m->host_non_model = values<int64_t>(in, n);
  }
  auto& e = p.events;
  e.time_s = e.duration_s = values<double>(in, events);
  e.step = e.moment = e.chunk = e.bytes = values<int64_t>(in, events);
  e.kind = codes(in, events, 8);
  p.location = codes(in, moments * chunks, 3);
  auto& s = p.steps;
  s.step = s.device_peak_bytes = s.host_peak_bytes = s.moved_h2d_bytes = s.moved_d2h_bytes =
      values<int64_t>(in, steps);
  s.time_s = s.forward_s = s.backward_s = s.optimizer_s = s.loss = values<double>(in, steps);
  return p;
}

// A type for a replaced dataset or attribute: the right ones, near misses, and strings.
H5::DataType pick_type(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 9)) {
    case 0:
      return H5::PredType::STD_I8LE;
    case 1:
      return H5::PredType::STD_I64LE;
    case 2:
      return H5::PredType::IEEE_F64LE;
    case 3:
      return H5::PredType::STD_U64LE;
    case 4:
      return H5::PredType::STD_I32BE;
    case 5:
      return H5::PredType::IEEE_F32LE;
    case 6:
      return H5::PredType::STD_U8LE;
    case 7: {
      H5::StrType type(H5::PredType::C_S1, 8);  // fixed-length
      return type;
    }
    default: {
      H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
      type.setCset(H5T_CSET_UTF8);
      return type;
    }
  }
}

// A dataspace: scalar, null, or simple of rank 1 to 3 with small, empty or huge dimensions.
H5::DataSpace pick_space(FuzzedDataProvider& in, bool* huge) {
  const int kind = in.ConsumeIntegralInRange(0, 9);
  if (kind == 0) return H5::DataSpace(H5S_SCALAR);
  if (kind == 1) return H5::DataSpace(H5S_NULL);
  const int rank = kind < 7 ? 1 : (kind < 9 ? 2 : 3);
  hsize_t dims[3];
  for (int i = 0; i < rank; ++i) {
    const hsize_t choices[] = {0, 1, 2, 3, 4, 7, hsize_t{1} << 33, hsize_t{1} << 62};
    dims[i] = in.PickValueInArray(choices);
    *huge = *huge || dims[i] > 64;
  }
  return H5::DataSpace(rank, dims);
}

// Fills a dataset or attribute of `type` and `space` with input bytes (strings for a string type).
template <typename Object>
void fill(FuzzedDataProvider& in, Object& object, const H5::DataType& type,
          const H5::DataSpace& space) {
  // The two classes take their arguments in opposite orders.
  auto write = [&](const void* buffer) {
    if constexpr (std::is_same_v<Object, H5::DataSet>) {
      object.write(buffer, type);
    } else {
      object.write(type, buffer);
    }
  };
  const hssize_t n = space.getSimpleExtentNpoints();
  if (n <= 0) return;
  if (type.getClass() == H5T_STRING && H5::StrType(type.getId()).isVariableStr()) {
    const std::vector<std::string> text = strings(in, static_cast<size_t>(n));
    std::vector<const char*> pointers;
    for (const std::string& s : text) pointers.push_back(s.c_str());
    write(pointers.data());
    return;
  }
  std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(static_cast<size_t>(n) * type.getSize());
  bytes.resize(static_cast<size_t>(n) * type.getSize());
  write(bytes.data());
}

void replace_dataset(FuzzedDataProvider& in, H5::H5File& file, const std::string& path) {
  if (H5Lexists(file.getId(), path.c_str(), H5P_DEFAULT) > 0) file.unlink(path);
  const H5::DataType type = pick_type(in);
  bool huge = false;
  const H5::DataSpace space = pick_space(in, &huge);
  H5::DSetCreatPropList plist;
  if (huge) {
    // Chunked and never written: the file stores none of what the dataspace claims.
    const int rank = space.getSimpleExtentNdims();
    hsize_t dims[3], chunk[3];
    space.getSimpleExtentDims(dims);
    for (int i = 0; i < rank; ++i) chunk[i] = dims[i] < 16 ? dims[i] : 16;
    plist.setChunk(rank, chunk);
  }
  H5::DataSet dataset = file.createDataSet(path, type, space, plist);
  if (!huge) fill(in, dataset, type, space);
}

void replace_attribute(FuzzedDataProvider& in, H5::H5File& file, const char* object,
                       const char* name) {
  H5::H5Object* target = nullptr;
  H5::Group group;
  H5::DataSet dataset;
  if (std::strcmp(object, "/location") == 0) {
    dataset = file.openDataSet(object);
    target = &dataset;
  } else {
    group = file.openGroup(object);
    target = &group;
  }
  if (target->attrExists(name)) target->removeAttr(name);
  if (in.ConsumeBool()) return;  // deleted
  const H5::DataType type = pick_type(in);
  bool huge = false;
  H5::DataSpace space = pick_space(in, &huge);
  if (huge) space = H5::DataSpace(H5S_SCALAR);  // attributes are stored whole
  H5::Attribute attr = target->createAttribute(name, type, space);
  fill(in, attr, type, space);
}

// Writes the profile the script describes, then applies its edits. Returns false if HDF5 refused
// an edit (e.g. a dataset in a group an earlier edit deleted): the input is then not useful.
bool write_tampered(FuzzedDataProvider& in, const std::string& path) {
  pstar::formats::write_profile(path, small_profile(in));
  try {
    H5::H5File file(path, H5F_ACC_RDWR);
    const int edits = in.ConsumeIntegralInRange(0, 8);
    for (int i = 0; i < edits; ++i) {
      switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0: {
          const std::string target = in.PickValueInArray(kObjects);
          if (H5Lexists(file.getId(), target.c_str(), H5P_DEFAULT) > 0) file.unlink(target);
          break;
        }
        case 1:
          replace_dataset(in, file, in.PickValueInArray(kObjects));
          break;
        default: {
          const auto& attribute = kAttributes[in.ConsumeIntegralInRange<size_t>(
              0, sizeof(kAttributes) / sizeof(kAttributes[0]) - 1)];
          replace_attribute(in, file, attribute[0], attribute[1]);
          break;
        }
      }
    }
  } catch (const H5::Exception&) {
    return false;
  }
  // The edits changed the file under its checksum header: reseal it, so that the reader's checks
  // of the contents, not the checksum, are what this mode exercises.
  pstar::formats::reseal_profile(path);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5::Exception::dontPrint();  // failed edits are expected; HDF5 would print each one
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstar;
  static fuzz::ScratchDir dir;
  static const bool raw_mode = std::getenv("PSTAR_FUZZ_PROFILE_RAW") != nullptr &&
                               std::string(std::getenv("PSTAR_FUZZ_PROFILE_RAW")) == "1";
  const bool hdf5_file = size >= sizeof(kHdf5Signature) - 1 &&
                         std::memcmp(data, kHdf5Signature, sizeof(kHdf5Signature) - 1) == 0;
  if (hdf5_file && !raw_mode) return -1;  // a raw file: not run, not kept

  std::string path;
  if (raw_mode) {
    path = dir.write("input.h5", data, size);
  } else {
    path = dir.file("input.h5");
    FuzzedDataProvider in(data, size);
    if (!write_tampered(in, path)) return -1;
  }
  fuzz::expect_typed_errors(path, {ErrorKind::kFormat, ErrorKind::kIo}, [&] {
    Profile profile;
    try {
      profile = formats::read_profile(path);
    } catch (const H5::Exception& e) {
      fuzz::finding(
          str_cat("an HDF5 exception escaped: ", e.getFuncName(), ": ", e.getDetailMsg()));
    }
    const std::string copy = dir.file("copy.h5");
    try {
      formats::write_profile(copy, profile);
      const bool equal = same(profile, formats::read_profile(copy));
      ::unlink(copy.c_str());
      if (!equal) fuzz::finding("the profile reads back differently once written");
    } catch (const Error& e) {
      ::unlink(copy.c_str());
      fuzz::finding(
          str_cat("a profile the reader accepted does not write and read back: ", e.what()));
    }
  });
  return 0;
}
