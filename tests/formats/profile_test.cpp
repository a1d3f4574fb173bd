// Tests of the HDF5 profile file: round trips (full, empty, zero-row and zero-column location
// matrices) and the atomic write. The malformed files are in profile_read_errors_test.cpp, h5py
// and the checksums in profile_interop_test.cpp; every test works in a fresh scratch directory.
#include "profile_fixture.h"

namespace pstar::formats {
namespace {

using namespace pstar::formats::profile_testing;  // NOLINT(build/namespaces): the fixture

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

}  // namespace
}  // namespace pstar::formats
