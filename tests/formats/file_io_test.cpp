// Tests of MappedFile, write_file_atomic and AtomicFileWriter (pstar/formats/mapped_file.h). Every
// test builds its own small files in a fresh directory under ::testing::TempDir().
#include "pstar/formats/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "formats_file_fixture.h"
#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

namespace fs = std::filesystem;
using pstar::formats::file_testing::FormatsFileTest;
using pstar::testing::message_of;
using pstar::testing::read_bytes;
using pstar::testing::write_bytes;

// ---------------------------------------------------------------------------------------------
// MappedFile

using MappedFileTest = FormatsFileTest;

TEST_F(MappedFileTest, MapsWholeFile) {
  write_bytes(path("f"), {1, 2, 3});
  MappedFile file(path("f"));
  ASSERT_EQ(file.size(), 3u);
  EXPECT_EQ(file.data()[2], 3);
  EXPECT_EQ(file.path(), path("f"));
}

TEST_F(MappedFileTest, EmptyFileHasSizeZeroAndNoData) {
  write_bytes(path("empty"), {});
  MappedFile file(path("empty"));
  EXPECT_EQ(file.size(), 0u);
  EXPECT_EQ(file.data(), nullptr);
}

TEST_F(MappedFileTest, MissingFileNamesPathAndReason) {
  const std::string msg = message_of<IoError>([&] { MappedFile file(path("nope")); });
  EXPECT_NE(msg.find(path("nope")), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
}

TEST_F(MappedFileTest, DirectoryIsRejected) {
  const std::string msg = message_of<IoError>([&] { MappedFile file(dir().string()); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

TEST_F(MappedFileTest, MoveTransfersTheMapping) {
  write_bytes(path("f"), {7, 8});
  MappedFile a(path("f"));
  MappedFile b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b.data()[1], 8);
  MappedFile c;
  c = std::move(b);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c.data()[0], 7);
}

// ---------------------------------------------------------------------------------------------
// write_file_atomic

using WriteFileAtomicTest = FormatsFileTest;

TEST_F(WriteFileAtomicTest, CreatesAndReplacesFileLeavingNoTemporaries) {
  const std::string text1 = "first";
  const std::string text2 = "second version";
  write_file_atomic(path("out"), text1.data(), text1.size());
  write_file_atomic(path("out"), text2.data(), text2.size());
  const std::vector<uint8_t> got = read_bytes(path("out"));
  EXPECT_EQ(std::string(got.begin(), got.end()), text2);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"out"});
}

TEST_F(WriteFileAtomicTest, WritesEmptyFile) {
  write_file_atomic(path("empty"), nullptr, 0);
  EXPECT_EQ(fs::file_size(path("empty")), 0u);
}

TEST_F(WriteFileAtomicTest, MissingDirectoryThrowsIoErrorNamingPath) {
  const std::string target = path("no_such_dir/out.bin");
  const std::string msg = message_of<IoError>([&] { write_file_atomic(target, "x", 1); });
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
  EXPECT_NE(msg.find("exists and is writable"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("no_such_dir")));
}

TEST_F(WriteFileAtomicTest, UnwritableDirectoryKeepsOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not apply";
  const std::string old_text = "old";
  write_file_atomic(path("out"), old_text.data(), old_text.size());
  fs::permissions(dir(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string msg = message_of<IoError>([&] { write_file_atomic(path("out"), "new", 3); });
  fs::permissions(dir(), fs::perms::owner_all);
  EXPECT_NE(msg.find(path("out")), std::string::npos) << msg;
  const std::vector<uint8_t> got = read_bytes(path("out"));
  EXPECT_EQ(std::string(got.begin(), got.end()), old_text);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"out"});
}

// A write that fails midway (here: the file size limit) must remove the temporary and leave the
// old file untouched. Works as root too, unlike directory permissions.
TEST_F(WriteFileAtomicTest, FailedWriteKeepsOldFileAndRemovesTemporary) {
  const std::string old_text = "old contents";
  write_file_atomic(path("out"), old_text.data(), old_text.size());
  const std::vector<uint8_t> big(64 * 1024, 0xab);

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 4096;
  auto* saved_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of the signal
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    write_file_atomic(path("out"), big.data(), big.size());
  } catch (const IoError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, saved_handler);

  EXPECT_NE(msg.find(path("out")), std::string::npos) << msg;
  EXPECT_NE(msg.find("after 4096 bytes"), std::string::npos) << msg;
  const std::vector<uint8_t> got = read_bytes(path("out"));
  EXPECT_EQ(std::string(got.begin(), got.end()), old_text);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"out"});
}

TEST_F(WriteFileAtomicTest, AtomicFileWriterFillsGapsAndPublishesOnlyOnCommit) {
  {
    AtomicFileWriter file(path("out"));
    file.write_at(4, "tail", 4);
    file.write_at(0, "head", 4);
    file.append("!", 1);
    EXPECT_EQ(file.size_bytes(), 9u);
    EXPECT_FALSE(fs::exists(path("out")));
    file.commit();
  }
  const std::vector<uint8_t> got = read_bytes(path("out"));
  EXPECT_EQ(std::string(got.begin(), got.end()), "headtail!");
  {
    AtomicFileWriter file(path("out"));
    file.append("new", 3);
  }  // no commit: the old file stays, and no temporary is left
  const std::vector<uint8_t> kept = read_bytes(path("out"));
  EXPECT_EQ(std::string(kept.begin(), kept.end()), "headtail!");
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"out"});
}

}  // namespace
}  // namespace pstar::formats
