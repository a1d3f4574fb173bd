// Note [publish by rename]: TempPath's name, its cleanup when unpublished, and publishing a file
// and a folder over their destinations; UniqueFd's ownership.
#include "pstar/formats/file_guard.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

namespace fs = std::filesystem;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

TEST(TempPath, LivesBesideItsTargetAndIsRemovedUnpublished) {
  ScratchDir dir;
  const std::string target = dir.file("out.h5");
  write_text(target, "old");
  std::string temp;
  {
    TempPath t(target);
    temp = t.path();
    EXPECT_EQ(fs::path(temp).parent_path(), fs::path(target).parent_path());
    EXPECT_EQ(fs::path(temp).filename().string().rfind(".out.h5.tmp.", 0), 0u) << temp;
    write_text(temp, "half-written");
    TempPath other(target);
    EXPECT_NE(other.path(), temp) << "two guards in one process share a name";
  }
  EXPECT_FALSE(fs::exists(temp)) << "an unpublished temporary was left behind";
  EXPECT_EQ(read_text(target), "old") << "the destination changed without a publish";
}

TEST(TempPath, PublishesAFileOverItsTarget) {
  ScratchDir dir;
  const std::string target = dir.file("figure.png");
  write_text(target, "old");
  std::string temp;
  {
    TempPath t(target);
    temp = t.path();
    write_text(temp, "new");
    t.publish("figure");
  }
  EXPECT_EQ(read_text(target), "new");
  EXPECT_FALSE(fs::exists(temp));
}

TEST(TempPath, PublishesAFolderWholeAndRefusesAnExistingOne) {
  ScratchDir dir;
  const std::string target = dir.file("resharded");
  {
    TempPath t(target);
    fs::create_directories(t.path());
    write_text(t.path() + "/ckpt-0.pt", "rank 0");
    write_text(t.path() + "/manifest.json", "{}");
    EXPECT_FALSE(fs::exists(target)) << "the folder appeared before it was complete";
    t.publish("resharded checkpoint");
  }
  EXPECT_EQ(read_text(target + "/ckpt-0.pt"), "rank 0");
  EXPECT_TRUE(fs::exists(target + "/manifest.json"));
  // A folder is never renamed over another with contents: IoError naming the target, and the
  // temporary is cleaned up.
  std::string temp;
  {
    TempPath t(target);
    temp = t.path();
    fs::create_directories(t.path());
    write_text(t.path() + "/ckpt-0.pt", "other");
    try {
      t.publish("resharded checkpoint");
      FAIL() << "a folder was published over a non-empty one";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(target), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(read_text(target + "/ckpt-0.pt"), "rank 0");
}

TEST(UniqueFd, ClosesOnceAndMovesOwnership) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  write_text(path, "x");
  UniqueFd a(open_retrying(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(a);
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a);
  EXPECT_EQ(b.get(), raw);
  EXPECT_EQ(b.close(), 0);
  EXPECT_FALSE(b);
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1) << "the descriptor is still open";
  EXPECT_EQ(sync_path(dir.path().string(), O_RDONLY | O_DIRECTORY), 0);
  EXPECT_NE(sync_path(dir.file("missing"), O_RDONLY), 0);
}

}  // namespace
}  // namespace pstar::formats
