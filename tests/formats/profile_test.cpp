// Tests of the HDF5 profile file: round trips (full, empty, zero-row and zero-column location
// matrices), the atomic write, every kind of malformed file, and a read through h5py. Files are
// tampered with through HDF5's own APIs; every test works in a fresh scratch directory.
#include "pstar/formats/profile.h"

#include <H5Cpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/version.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

namespace fs = std::filesystem;
using pstar::testing::message_of;

class ProfileTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.file(name); }

  std::vector<std::string> dir_entries(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  pstar::testing::ScratchDir scratch_;
};

int8_t code(ProfileStage s) { return static_cast<int8_t>(s); }
int8_t code(ChunkPlace p) { return static_cast<int8_t>(p); }

// A profile with distinct, non-trivial values in every column: 3 chunks, 2 steps of 2 moments,
// 5 clock samples, an event of every kind and a NaN loss.
Profile full_profile() {
  Profile p;
  ProfileRun& r = p.run;
  // Over 64 KiB with quotes, newlines and UTF-8: larger than an HDF5 object header holds inline.
  r.config_json = "{\"model\": \"gpt2\", \"note\": \"µ-batch ✓\\n\"}\n" + std::string(70000, 'x');
  r.pstar_version = "0.4.0-dev";
  r.torch_version = "2.1.2";
  r.created = "2024-05-06T07:08:09Z";
  r.precision = "bf16";
  r.chunk_size = 524288;
  r.num_chunks = 3;
  r.compute_bytes_per_chunk = 1048576;
  r.optimizer_bytes_per_chunk = 6291456;
  r.device_budget = int64_t{80} << 30;
  r.host_budget = int64_t{1} << 40;
  r.world_size = 2;
  r.rank = 1;
  r.warmup_iterations = 1;
  r.steps = 2;

  ProfileChunks& c = p.chunks;
  c.id = {0, 1, 2};
  c.numel = {524288, 400000, 123};
  c.capacity = {524288, 524288, 524288};
  c.group = {0, 0, 1};
  c.owner = {0, 1, 0};
  c.embedding = {1, 0, 0};
  c.payloads = {"param+grad,master,exp_avg,exp_avg_sq", "", "param+grad (gathered) ✓"};

  ProfileMemory& m = p.by_moment;
  m.step = {1, 1, 2, 2};
  m.moment = {0, 1, 0, 1};
  m.name = {"forward of transformer.h.0.attn.c_attn.weight", "backward of lm_head", "",
            "optimizer"};
  m.stage = {code(ProfileStage::kForward), code(ProfileStage::kBackward),
             code(ProfileStage::kForward), code(ProfileStage::kOptimizer)};
  m.time_s = {0.0, 0.125, 1.5, 1.75e-3};
  m.device_total = {100, 200, int64_t{1} << 50, 0};
  m.device_chunks = {60, 120, 7, 0};
  m.device_non_model = {40, 80, (int64_t{1} << 50) - 7, 0};
  m.host_total = {1, 2, 3, 4};
  m.host_chunks = {1, 2, 3, 3};
  m.host_non_model = {0, 0, 0, 1};

  ProfileMemory& t = p.by_time;
  t.stage = {0, 0, 1, 1, 2};
  t.time_s = {0.0, 0.005, 0.01, 0.015, 0.02};
  t.device_total = {10, 20, 30, 40, 50};
  t.device_chunks = {5, 10, 15, 20, 25};
  t.device_non_model = {5, 10, 15, 20, 25};
  t.host_total = {7, 7, 7, 7, -7};
  t.host_chunks = {7, 7, 7, 7, -7};
  t.host_non_model = {0, 0, 0, 0, 0};

  ProfileEvents& e = p.events;
  for (int k = 0; k < 8; ++k) {
    e.time_s.push_back(0.01 * k);
    e.step.push_back(1 + k / 4);
    e.moment.push_back(k % 3 == 0 ? -1 : k / 2);  // -1: outside any moment
    e.chunk.push_back(k % 3);
    e.kind.push_back(static_cast<int8_t>(k));
    e.bytes.push_back(int64_t{1} << (k + 20));
    e.duration_s.push_back(k * 1e-6);
  }

  p.location = {code(ChunkPlace::kDevice), code(ChunkPlace::kHost),   code(ChunkPlace::kAbsent),
                code(ChunkPlace::kHost),   code(ChunkPlace::kDevice), code(ChunkPlace::kAbsent),
                code(ChunkPlace::kDevice), code(ChunkPlace::kDevice), code(ChunkPlace::kHost),
                code(ChunkPlace::kAbsent), code(ChunkPlace::kHost),   code(ChunkPlace::kHost)};

  ProfileSteps& s = p.steps;
  s.step = {1, 2};
  s.time_s = {1.25, 1.0};
  s.forward_s = {0.5, 0.4};
  s.backward_s = {0.6, 0.5};
  s.optimizer_s = {0.15, 0.1};
  s.loss = {5.4497, std::numeric_limits<double>::quiet_NaN()};
  s.device_peak_bytes = {177471488, 177471489};
  s.host_peak_bytes = {73400320, 0};
  s.moved_h2d_bytes = {8608808, 0};
  s.moved_d2h_bytes = {0, 8608808};
  return p;
}

// Doubles compared bit for bit, so that NaN equals NaN.
void expect_same(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, a.empty() ? 0 : std::memcmp(a.data(), b.data(), a.size() * sizeof(double))) << what;
}

void expect_same(const ProfileMemory& a, const ProfileMemory& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.moment, b.moment);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.stage, b.stage);
  expect_same(a.time_s, b.time_s, "memory time_s");
  EXPECT_EQ(a.device_total, b.device_total);
  EXPECT_EQ(a.device_chunks, b.device_chunks);
  EXPECT_EQ(a.device_non_model, b.device_non_model);
  EXPECT_EQ(a.host_total, b.host_total);
  EXPECT_EQ(a.host_chunks, b.host_chunks);
  EXPECT_EQ(a.host_non_model, b.host_non_model);
}

void expect_same(const Profile& a, const Profile& b) {
  EXPECT_EQ(a.run.schema_version, b.run.schema_version);
  EXPECT_EQ(a.run.config_json, b.run.config_json);
  EXPECT_EQ(a.run.pstar_version, b.run.pstar_version);
  EXPECT_EQ(a.run.torch_version, b.run.torch_version);
  EXPECT_EQ(a.run.created, b.run.created);
  EXPECT_EQ(a.run.precision, b.run.precision);
  EXPECT_EQ(a.run.chunk_size, b.run.chunk_size);
  EXPECT_EQ(a.run.num_chunks, b.run.num_chunks);
  EXPECT_EQ(a.run.compute_bytes_per_chunk, b.run.compute_bytes_per_chunk);
  EXPECT_EQ(a.run.optimizer_bytes_per_chunk, b.run.optimizer_bytes_per_chunk);
  EXPECT_EQ(a.run.device_budget, b.run.device_budget);
  EXPECT_EQ(a.run.host_budget, b.run.host_budget);
  EXPECT_EQ(a.run.world_size, b.run.world_size);
  EXPECT_EQ(a.run.rank, b.run.rank);
  EXPECT_EQ(a.run.warmup_iterations, b.run.warmup_iterations);
  EXPECT_EQ(a.run.steps, b.run.steps);

  EXPECT_EQ(a.chunks.id, b.chunks.id);
  EXPECT_EQ(a.chunks.numel, b.chunks.numel);
  EXPECT_EQ(a.chunks.capacity, b.chunks.capacity);
  EXPECT_EQ(a.chunks.group, b.chunks.group);
  EXPECT_EQ(a.chunks.owner, b.chunks.owner);
  EXPECT_EQ(a.chunks.embedding, b.chunks.embedding);
  EXPECT_EQ(a.chunks.payloads, b.chunks.payloads);

  expect_same(a.by_moment, b.by_moment);
  expect_same(a.by_time, b.by_time);

  expect_same(a.events.time_s, b.events.time_s, "events time_s");
  EXPECT_EQ(a.events.step, b.events.step);
  EXPECT_EQ(a.events.moment, b.events.moment);
  EXPECT_EQ(a.events.chunk, b.events.chunk);
  EXPECT_EQ(a.events.kind, b.events.kind);
  EXPECT_EQ(a.events.bytes, b.events.bytes);
  expect_same(a.events.duration_s, b.events.duration_s, "events duration_s");

  EXPECT_EQ(a.location, b.location);

  EXPECT_EQ(a.steps.step, b.steps.step);
  expect_same(a.steps.time_s, b.steps.time_s, "steps time_s");
  expect_same(a.steps.forward_s, b.steps.forward_s, "steps forward_s");
  expect_same(a.steps.backward_s, b.steps.backward_s, "steps backward_s");
  expect_same(a.steps.optimizer_s, b.steps.optimizer_s, "steps optimizer_s");
  expect_same(a.steps.loss, b.steps.loss, "steps loss");
  EXPECT_EQ(a.steps.device_peak_bytes, b.steps.device_peak_bytes);
  EXPECT_EQ(a.steps.host_peak_bytes, b.steps.host_peak_bytes);
  EXPECT_EQ(a.steps.moved_h2d_bytes, b.steps.moved_h2d_bytes);
  EXPECT_EQ(a.steps.moved_d2h_bytes, b.steps.moved_d2h_bytes);
}

std::vector<hsize_t> dataset_dims(const std::string& file_path, const std::string& dataset) {
  H5::H5File file(file_path, H5F_ACC_RDONLY);
  const H5::DataSpace space = file.openDataSet(dataset).getSpace();
  std::vector<hsize_t> dims(static_cast<size_t>(space.getSimpleExtentNdims()));
  space.getSimpleExtentDims(dims.data());
  return dims;
}

// Tampering, through HDF5's C API (an id closed on destruction) and its C++ API.
class RawFile {
 public:
  explicit RawFile(const std::string& path)
      : id_(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    EXPECT_GE(id_, 0) << "cannot open " << path;
  }
  ~RawFile() {
    if (id_ >= 0) H5Fclose(id_);
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;
  void delete_link(const char* name) { EXPECT_GE(H5Ldelete(id_, name, H5P_DEFAULT), 0) << name; }

 private:
  hid_t id_;
};

// Every edit below goes through HDF5 and then reseals the file (a new checksum header), so that
// the reader's own checks of the contents are what the tests reach (Note [profile checksum]).
void set_schema_version(const std::string& path, int64_t version) {
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    file.openAttribute("schema_version").write(H5::PredType::NATIVE_INT64, &version);
  }
  reseal_profile(path);
}

// Replaces dataset `name` by one of the given type and shape holding `values` (repeated).
template <typename T>
void replace_dataset(const std::string& path, const std::string& name, const H5::PredType& type,
                     std::vector<hsize_t> dims, T value) {
  RawFile(path).delete_link(name.c_str());
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    size_t total = 1;
    for (hsize_t d : dims) total *= d;
    std::vector<T> values(total, value);
    H5::DataSet dataset =
        file.createDataSet(name, type, H5::DataSpace(static_cast<int>(dims.size()), dims.data()));
    if (total > 0) dataset.write(values.data(), type);
  }
  reseal_profile(path);
}

// ---------------------------------------------------------------------------------------------

// profile_absent_test.cpp checks the other answer, in builds without HDF5.
TEST(ProfileIoTest, BuiltWithHdf5) {
  EXPECT_TRUE(profile_io_built());
  EXPECT_NO_THROW(require_profile_io("pstar profile"));
}

TEST_F(ProfileTest, RoundTripsEveryColumn) {
  const Profile p = full_profile();
  write_profile(path("p.h5"), p);
  expect_same(read_profile(path("p.h5")), p);
  EXPECT_EQ(dir_entries(scratch_.path()), std::vector<std::string>{"p.h5"});  // no temporary left
  EXPECT_EQ(dataset_dims(path("p.h5"), "/location"), (std::vector<hsize_t>{4, 3}));
}

TEST_F(ProfileTest, OverwritesAnExistingProfile) {
  write_profile(path("p.h5"), Profile{});
  const Profile p = full_profile();
  write_profile(path("p.h5"), p);
  expect_same(read_profile(path("p.h5")), p);
}

TEST_F(ProfileTest, RoundTripsEmptyTables) {
  const Profile empty;
  write_profile(path("empty.h5"), empty);
  expect_same(read_profile(path("empty.h5")), empty);
  EXPECT_EQ(dataset_dims(path("empty.h5"), "/location"), (std::vector<hsize_t>{0, 0}));
  EXPECT_EQ(dataset_dims(path("empty.h5"), "/events/kind"), (std::vector<hsize_t>{0}));

  // Chunks but no moments: a location matrix of 0 rows; and moments but no chunks: 0 columns.
  Profile no_moments = full_profile();
  no_moments.by_moment = ProfileMemory{};
  no_moments.location.clear();
  no_moments.events = ProfileEvents{};
  write_profile(path("rows.h5"), no_moments);
  expect_same(read_profile(path("rows.h5")), no_moments);
  EXPECT_EQ(dataset_dims(path("rows.h5"), "/location"), (std::vector<hsize_t>{0, 3}));

  Profile no_chunks = full_profile();
  no_chunks.chunks = ProfileChunks{};
  no_chunks.location.clear();
  no_chunks.steps = ProfileSteps{};
  write_profile(path("cols.h5"), no_chunks);
  expect_same(read_profile(path("cols.h5")), no_chunks);
  EXPECT_EQ(dataset_dims(path("cols.h5"), "/location"), (std::vector<hsize_t>{4, 0}));
}

TEST_F(ProfileTest, RoundTripsALargeLocationMatrix) {
  // More rows than one compressed chunk of the dataset holds.
  Profile p;
  const int chunks = 7, moments = 20000;
  for (int c = 0; c < chunks; ++c) {
    p.chunks.id.push_back(c);
    p.chunks.numel.push_back(c);
    p.chunks.capacity.push_back(c);
    p.chunks.group.push_back(c);
    p.chunks.owner.push_back(0);
    p.chunks.embedding.push_back(0);
    p.chunks.payloads.push_back("param");
  }
  for (int m = 0; m < moments; ++m) {
    p.by_moment.step.push_back(m / 100);
    p.by_moment.moment.push_back(m % 100);
    p.by_moment.name.push_back("m" + std::to_string(m));
    p.by_moment.stage.push_back(static_cast<int8_t>(m % 3));
    p.by_moment.time_s.push_back(m * 1e-3);
    for (auto* column :
         {&p.by_moment.device_total, &p.by_moment.device_chunks, &p.by_moment.device_non_model,
          &p.by_moment.host_total, &p.by_moment.host_chunks, &p.by_moment.host_non_model}) {
      column->push_back(int64_t{m} * 4096);
    }
    for (int c = 0; c < chunks; ++c) p.location.push_back(static_cast<int8_t>((m + c) % 3));
  }
  write_profile(path("big.h5"), p);
  expect_same(read_profile(path("big.h5")), p);
}

// ---------------------------------------------------------------------------------------------
// Atomic writing

TEST_F(ProfileTest, MissingDirectoryIsAnIoErrorAndLeavesNoFile) {
  const std::string target = path("missing/p.h5");
  const std::string msg = message_of<IoError>([&] { write_profile(target, full_profile()); });
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("missing")));
  EXPECT_TRUE(dir_entries(scratch_.path()).empty());
}

TEST_F(ProfileTest, UnwritableDirectoryIsAnIoErrorAndLeavesNoFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not apply";
  const fs::path dir = scratch_.path() / "ro";
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string target = (dir / "p.h5").string();
  const std::string msg = message_of<IoError>([&] { write_profile(target, full_profile()); });
  fs::permissions(dir, fs::perms::owner_all);
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
  EXPECT_TRUE(dir_entries(dir).empty());
}

TEST_F(ProfileTest, FailedRenameRemovesTheTemporary) {
  // The real name is a non-empty directory: the file is written, but renaming it there fails.
  fs::create_directories(scratch_.path() / "p.h5" / "inside");
  const std::string msg = message_of<IoError>([&] { write_profile(path("p.h5"), full_profile()); });
  EXPECT_NE(msg.find(path("p.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("renaming"), std::string::npos) << msg;
  EXPECT_EQ(dir_entries(scratch_.path()), std::vector<std::string>{"p.h5"});
  EXPECT_TRUE(fs::is_directory(path("p.h5")));
}

TEST_F(ProfileTest, InconsistentColumnsAreAnInternalErrorAndKeepTheOldFile) {
  const Profile old = full_profile();
  write_profile(path("p.h5"), old);

  Profile bad = full_profile();
  bad.events.bytes.pop_back();
  std::string msg = message_of<InternalError>([&] { write_profile(path("p.h5"), bad); });
  EXPECT_NE(msg.find("/events/bytes"), std::string::npos) << msg;

  bad = full_profile();
  bad.location.pop_back();
  msg = message_of<InternalError>([&] { write_profile(path("p.h5"), bad); });
  EXPECT_NE(msg.find("/location"), std::string::npos) << msg;

  bad = full_profile();
  bad.by_time.step = {1, 1, 1, 1, 1};
  message_of<InternalError>([&] { write_profile(path("p.h5"), bad); });

  bad = full_profile();
  bad.events.kind[3] = 10;
  msg = message_of<InternalError>([&] { write_profile(path("p.h5"), bad); });
  EXPECT_NE(msg.find("/events/kind[3]"), std::string::npos) << msg;

  expect_same(read_profile(path("p.h5")), old);
  EXPECT_EQ(dir_entries(scratch_.path()), std::vector<std::string>{"p.h5"});
}

// ---------------------------------------------------------------------------------------------
// Reading bad files

TEST_F(ProfileTest, MissingFileIsAnIoError) {
  const std::string msg = message_of<IoError>([&] { read_profile(path("nope.h5")); });
  EXPECT_NE(msg.find(path("nope.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;

  const std::string dir_msg = message_of<IoError>([&] { read_profile(scratch_.path().string()); });
  EXPECT_NE(dir_msg.find("not a regular file"), std::string::npos) << dir_msg;
}

TEST_F(ProfileTest, GarbageFileIsAFormatError) {
  pstar::testing::write_text(path("garbage.h5"), "this is not HDF5 at all, just some text\n");
  std::string msg = message_of<FormatError>([&] { read_profile(path("garbage.h5")); });
  EXPECT_NE(msg.find(path("garbage.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a pstar profile"), std::string::npos) << msg;

  pstar::testing::write_text(path("empty.h5"), "");
  msg = message_of<FormatError>([&] { read_profile(path("empty.h5")); });
  EXPECT_NE(msg.find(path("empty.h5")), std::string::npos) << msg;
}

TEST_F(ProfileTest, TruncatedFileIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  fs::resize_file(path("p.h5"), fs::file_size(path("p.h5")) / 2);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find(path("p.h5")), std::string::npos) << msg;
}

TEST_F(ProfileTest, OtherHdf5FileIsNotAProfile) {
  { H5::H5File file(path("other.h5"), H5F_ACC_TRUNC); }
  std::string msg = message_of<FormatError>([&] { read_profile(path("other.h5")); });
  EXPECT_NE(msg.find(path("other.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a pstar profile"), std::string::npos) << msg;

  write_profile(path("p.h5"), full_profile());
  {
    H5::H5File file(path("p.h5"), H5F_ACC_RDWR);
    file.openAttribute("format").write(H5::StrType(H5::PredType::C_S1, H5T_VARIABLE),
                                       std::string("something-else"));
  }
  reseal_profile(path("p.h5"));
  msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("'something-else'"), std::string::npos) << msg;
}

TEST_F(ProfileTest, NewerSchemaIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  set_schema_version(path("p.h5"), 2);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find(path("p.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("newer pstar (schema 2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reads schema 1"), std::string::npos) << msg;
}

TEST_F(ProfileTest, MissingDatasetIsAFormatErrorNamingIt) {
  for (const char* name : {"/memory/by_moment/device_total", "/chunks/payloads", "/location",
                           "/steps/loss", "/events"}) {
    SCOPED_TRACE(name);
    const std::string file = path("p.h5");
    write_profile(file, full_profile());
    RawFile(file).delete_link(name);
    reseal_profile(file);
    const std::string msg = message_of<FormatError>([&] { read_profile(file); });
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(name) + " is missing"), std::string::npos) << msg;
  }
}

TEST_F(ProfileTest, MissingAttributeIsAFormatErrorNamingIt) {
  write_profile(path("p.h5"), full_profile());
  H5::H5File(path("p.h5"), H5F_ACC_RDWR).removeAttr("precision");
  reseal_profile(path("p.h5"));
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("attribute 'precision' of / is missing"), std::string::npos) << msg;
}

TEST_F(ProfileTest, WrongTypeIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int64_t>(path("p.h5"), "/steps/loss", H5::PredType::NATIVE_INT64, {2}, 5);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/steps/loss holds a 8-byte signed integer, expected float64"),
            std::string::npos)
      << msg;
}

TEST_F(ProfileTest, WrongRankIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int64_t>(path("p.h5"), "/chunks/id", H5::PredType::NATIVE_INT64, {3, 1}, 0);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/chunks/id has 2 dimension(s), expected 1"), std::string::npos) << msg;
}

TEST_F(ProfileTest, ColumnLengthsMustAgree) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int64_t>(path("p.h5"), "/events/bytes", H5::PredType::NATIVE_INT64, {7}, 1);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/events/bytes has 7 rows but /events/time_s has 8"), std::string::npos)
      << msg;
}

TEST_F(ProfileTest, LocationShapeMustMatchTheTables) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int8_t>(path("p.h5"), "/location", H5::PredType::NATIVE_INT8, {4, 4}, 1);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/location has shape [4, 4], expected [4, 3]"), std::string::npos) << msg;
}

// Replaces the string attribute `name` of `object` (a variable-length string, as the writer makes).
void set_string_attribute(const std::string& path, const std::string& object, const char* name,
                          const std::string& value) {
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    H5::H5Object* target = nullptr;
    H5::Group group;
    H5::DataSet dataset;
    if (object == "/events") {
      group = file.openGroup(object);
      target = &group;
    } else {
      dataset = file.openDataSet(object);
      target = &dataset;
    }
    target->removeAttr(name);
    const H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    target->createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, value);
  }
  reseal_profile(path);
}

// Codes are only ever added at the end: a file written before the NVMe tier, whose attributes name
// fewer places and event kinds, still reads; names that differ do not.
TEST_F(ProfileTest, AFileFromBeforeTheNvmeCodesReadsAndDifferentNamesDoNot) {
  write_profile(path("p.h5"), full_profile());
  set_string_attribute(path("p.h5"), "/location", "places", "absent,host,device");
  set_string_attribute(path("p.h5"), "/events", "kinds",
                       "move_h2d,move_d2h,allocate,release,adam_device,adam_host,gather,reduce");
  expect_same(read_profile(path("p.h5")), full_profile());
  set_string_attribute(path("p.h5"), "/location", "places", "absent,device,host");
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("codes differ"), std::string::npos) << msg;
}

TEST_F(ProfileTest, UnknownCodeIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int8_t>(path("p.h5"), "/events/kind", H5::PredType::NATIVE_INT8, {8}, 10);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/events/kind[0] is 10"), std::string::npos) << msg;
}

// A corrupt dataspace can claim any number of elements, and the reader allocates that many before
// reading: found by tests/fuzz/profile_fuzz (a 32 GiB vector). A dataset the file's bytes cannot
// hold must be a FormatError before anything is allocated.
TEST_F(ProfileTest, DatasetLargerThanTheFileIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  RawFile(path("p.h5")).delete_link("/events/time_s");
  {
    // 2^40 float64 (8 TiB), chunked and never written: the file stores none of them.
    H5::H5File file(path("p.h5"), H5F_ACC_RDWR);
    const hsize_t dims[1] = {hsize_t{1} << 40};
    const hsize_t chunk[1] = {1024};
    H5::DSetCreatPropList plist;
    plist.setChunk(1, chunk);
    file.createDataSet("/events/time_s", H5::PredType::IEEE_F64LE, H5::DataSpace(1, dims), plist);
  }
  reseal_profile(path("p.h5"));
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("dataset /events/time_s claims 1099511627776 elements"), std::string::npos)
      << msg;

  // The same for the location matrix, whose two dimensions multiply past 64 bits.
  write_profile(path("q.h5"), full_profile());
  RawFile(path("q.h5")).delete_link("/location");
  {
    H5::H5File file(path("q.h5"), H5F_ACC_RDWR);
    const hsize_t dims[2] = {hsize_t{1} << 40, hsize_t{1} << 40};
    const hsize_t chunk[2] = {64, 64};
    H5::DSetCreatPropList plist;
    plist.setChunk(2, chunk);
    file.createDataSet("/location", H5::PredType::STD_I8LE, H5::DataSpace(2, dims), plist);
  }
  reseal_profile(path("q.h5"));
  const std::string msg2 = message_of<FormatError>([&] { read_profile(path("q.h5")); });
  EXPECT_NE(msg2.find("dataset /location has shape [1099511627776, 1099511627776]"),
            std::string::npos)
      << msg2;
}

// ---------------------------------------------------------------------------------------------
// The file as h5py sees it

// A python with h5py: `python3`, else Debian's (python3-h5py installs there when `python3` on
// PATH is another build, e.g. pyenv's). Empty if there is none.
std::string python_with_h5py() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) + " -c 'import h5py' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

std::string run_command(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0) << command << "\n" << out;
  return out;
}

TEST_F(ProfileTest, H5pyReadsTheFile) {
  const std::string python = python_with_h5py();
  if (python.empty()) GTEST_SKIP() << "h5py is not installed (apt-get install python3-h5py)";
  write_profile(path("p.h5"), full_profile());
  pstar::testing::write_text(path("read.py"), R"(import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(len(f["chunks/id"]), f["chunks/id"].dtype, f["chunks/embedding"].dtype)
    print(type(f.attrs["precision"]).__name__, f.attrs["precision"], f.attrs["format"])
    print(int(f.attrs["schema_version"]), int(f.attrs["device_budget"]))
    print(f["memory/by_moment"].attrs["stages"])
    print(f["events"].attrs["kinds"])
    print(f["location"].shape, f["location"].dtype, f["location"].attrs["places"])
    print(f["location"][0].tolist(), f["chunks/payloads"].asstr()[2])
    print(f["memory/by_moment/device_total"][:].tolist())
    print(f["events/moment"][:].tolist())
    print(sorted(f["memory/by_time"].keys()))
    print(len(f.attrs["config_json"]))
    print(f.userblock_size)
)");
  const std::string out =
      run_command(python + " '" + path("read.py") + "' '" + path("p.h5") + "' 2>&1");
  const Profile p = full_profile();
  const std::string expected = str_cat(
      "3 int64 int8\n", "str bf16 pstar-profile\n", "1 85899345920\n",
      "forward,backward,optimizer\n",
      "move_h2d,move_d2h,allocate,release,adam_device,adam_host,gather,reduce,nvme_read,"
      "nvme_write\n",
      "(4, 3) int8 absent,host,device,nvme\n", "[2, 1, 0] param+grad (gathered) ✓\n",
      "[100, 200, 1125899906842624, 0]\n", "[-1, 0, 1, -1, 2, 2, -1, 3]\n",
      "['device_chunks', 'device_non_model', 'device_total', 'host_chunks', 'host_non_model', "
      "'host_total', 'stage', 'time_s']\n",
      // Python counts characters, not UTF-8 bytes: µ is two bytes and ✓ three.
      p.run.config_json.size() - 3, "\n",
      // pstar's checksum header, which h5py skips (Note [profile checksum]).
      "512\n");
  EXPECT_EQ(out, expected);
  // Reading it left it as it was.
  EXPECT_TRUE(read_profile(path("p.h5")).checksummed);
}

// ---------------------------------------------------------------------------------------------
// The checksum header (Note [profile checksum])

TEST_F(ProfileTest, ChecksumHeaderLeadsTheFile) {
  write_profile(path("p.h5"), full_profile());
  const std::string bytes = pstar::testing::read_text(path("p.h5"));
  ASSERT_GT(bytes.size(), 1024u);
  char expected[128];
  std::snprintf(expected, sizeof expected, "pstar-profile\ncrc32 %08x\nbytes %020zu\nversion %s\n",
                0u, bytes.size(), pstar::version());
  // The header as documented, its CRC-32 that of the file with the 8 digits read as '0's.
  std::string zeroed = bytes;
  zeroed.replace(20, 8, "00000000");
  EXPECT_EQ(zeroed.substr(0, std::strlen(expected)), expected);
  EXPECT_EQ(zeroed.find_first_not_of('\0', std::strlen(expected)), 512u);
  const uLong crc =
      ::crc32(0, reinterpret_cast<const Bytef*>(zeroed.data()), static_cast<uInt>(zeroed.size()));
  char digits[16];
  std::snprintf(digits, sizeof digits, "%08lx", crc);
  EXPECT_EQ(bytes.substr(20, 8), digits);
  // The HDF5 superblock right after it.
  EXPECT_EQ(bytes.substr(512, 8), "\x89HDF\r\n\x1a\n");
  EXPECT_TRUE(read_profile(path("p.h5")).checksummed);
}

// Any change after pstar wrote the file, even one HDF5 itself makes, is refused with the file's
// name before libhdf5 reads it; reseal_profile accepts a deliberate edit.
TEST_F(ProfileTest, ChangedBytesAreRefusedBeforeHdf5ReadsThem) {
  write_profile(path("p.h5"), full_profile());
  const std::string good = pstar::testing::read_text(path("p.h5"));
  struct Case {
    size_t offset;
    const char* message;
  };
  for (const Case& c :
       {Case{0, "has a damaged header"}, Case{3, "has a damaged header"},
        Case{14, "has a damaged checksum header"}, Case{21, "has a damaged checksum header"},
        Case{40, "has a damaged checksum header"}, Case{200, "is corrupt: its CRC-32 is"},
        Case{600, "is corrupt: its CRC-32 is"}, Case{good.size() / 2, "is corrupt: its CRC-32 is"},
        Case{good.size() - 1, "is corrupt: its CRC-32 is"}}) {
    SCOPED_TRACE(c.offset);
    std::string bytes = good;
    bytes[c.offset] = static_cast<char>(bytes[c.offset] ^ 0xff);
    pstar::testing::write_text(path("bad.h5"), bytes);
    const std::string msg = message_of<FormatError>([&] { read_profile(path("bad.h5")); });
    EXPECT_NE(msg.find("profile '" + path("bad.h5") + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
  // A recorded digit changed to another digit: the CRC-32 or the size no longer match.
  std::string bytes = good;
  bytes[21] = bytes[21] == '0' ? '1' : '0';
  pstar::testing::write_text(path("bad.h5"), bytes);
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("is corrupt: its CRC-32 is 0x"),
            std::string::npos);
  bytes = good;
  bytes[53] = bytes[53] == '0' ? '1' : '0';
  pstar::testing::write_text(path("bad.h5"), bytes);
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("bytes but its header records"),
            std::string::npos);
  // Appended to, and truncated.
  pstar::testing::write_text(path("bad.h5"), good + "x");
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("bytes but its header records " + std::to_string(good.size())),
            std::string::npos);
  pstar::testing::write_text(path("bad.h5"), good.substr(0, 300));
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("has a damaged checksum header"),
            std::string::npos);

  // An edit through HDF5 (as h5py's "r+" would make) changes the bytes under the header.
  H5::H5File(path("p.h5"), H5F_ACC_RDWR).removeAttr("precision");
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_TRUE(msg.find("is corrupt: its CRC-32 is") != std::string::npos ||
              msg.find("bytes but its header records") != std::string::npos)
      << msg;
  EXPECT_NE(msg.find("reseal"), std::string::npos) << msg;
  reseal_profile(path("p.h5"));
  const std::string after = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(after.find("attribute 'precision' of / is missing"), std::string::npos) << after;

  // Only a pstar profile can be resealed.
  { H5::H5File file(path("other.h5"), H5F_ACC_TRUNC); }
  EXPECT_NE(message_of<FormatError>([&] {
              reseal_profile(path("other.h5"));
            }).find("has no pstar checksum header"),
            std::string::npos);
}

// A profile from before checksums (an older pstar's, no user block; the fuzz corpus keeps one)
// still reads, unchecked.
TEST_F(ProfileTest, ProfilesFromBeforeChecksumsAreReadUnchecked) {
  const std::string old = std::string(PSTAR_SOURCE_DIR) + "/tests/fuzz/corpus/profile/tiny.h5";
  ASSERT_EQ(pstar::testing::read_text(old).substr(0, 8), "\x89HDF\r\n\x1a\n");
  const Profile p = read_profile(old);
  EXPECT_FALSE(p.checksummed);
  EXPECT_EQ(p.run.schema_version, 1);
  EXPECT_GT(p.chunks.size(), 0u);
  // Written again, it gets the header.
  write_profile(path("new.h5"), p);
  EXPECT_TRUE(read_profile(path("new.h5")).checksummed);
}

}  // namespace
}  // namespace pstar::formats
