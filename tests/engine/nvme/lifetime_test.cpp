// The run directory's life: made at open, gone at close, on SIGINT/SIGTERM and after errors, and
// removed by the next run when its process was killed; a live run's is never touched.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "nvme_test_util.h"
#include "pstar/base/error.h"
#include "pstar/nvme/cleanup.h"
#include "pstar/nvme/store.h"
#include "test_util.h"

namespace pstar::nvme {
namespace {

namespace fs = std::filesystem;
using testing::random_buffer;

// Runs `body` in a child process; its exit code, or 128 + the signal that ended it.
template <typename F>
int in_child(F&& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(NvmeLifetimeTest, TheDirectoryHoldsTheSlotsAndItsOwnerAndIsGoneAtClose) {
  pstar::testing::ScratchDir dir;
  const int registered = registered_cleanup_paths();
  std::string run_dir;
  {
    auto store = NvmeStore::open(dir.path().string(), "r1", 1 << 20, 3);
    run_dir = store->directory();
    EXPECT_EQ(run_dir, dir.file("pstar-r1"));
    EXPECT_TRUE(fs::exists(run_dir + "/owner"));
    EXPECT_EQ(pstar::testing::read_text(run_dir + "/owner"), std::to_string(getpid()) + "\n");
    EXPECT_EQ(fs::file_size(store->file_path()), 3u << 20);  // preallocated
    EXPECT_EQ(registered_cleanup_paths(), registered + 3);   // the directory and its two files
  }
  EXPECT_FALSE(fs::exists(run_dir));
  EXPECT_EQ(registered_cleanup_paths(), registered);
}

TEST(NvmeLifetimeTest, AStaleDirectoryOfAKilledRunIsReportedAndRemoved) {
  pstar::testing::ScratchDir dir;
  const std::string nvme = dir.path().string();
  // A child opens a store and dies without closing it (as SIGKILL would leave it).
  EXPECT_EQ(in_child([&] {
              auto store = NvmeStore::open(nvme, "killed", 1 << 20, 2);
              const AlignedBuffer data = random_buffer(1 << 20, 1);
              store->wait(store->write(0, data.data(), data.bytes()));
              std::fflush(nullptr);
              _exit(0);  // no destructors
            }),
            0);
  ASSERT_TRUE(fs::exists(dir.file("pstar-killed/slots")));
  ::testing::internal::CaptureStderr();
  auto store = NvmeStore::open(nvme, "next", 1 << 20, 2);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(dir.file("pstar-killed")));
  EXPECT_NE(log.find("stale directory " + dir.file("pstar-killed")), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(dir.file("pstar-next")));
}

TEST(NvmeLifetimeTest, ALiveRunsDirectoryIsLeftAloneAndItsRunIdRefused) {
  pstar::testing::ScratchDir dir;
  const std::string nvme = dir.path().string();
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    {
      auto store = NvmeStore::open(nvme, "live", 1 << 20, 2);
      char c = 'o';
      rc |= write(to_parent[1], &c, 1) == 1 ? 0 : 1;
      rc |= read(to_child[0], &c, 1) == 1 ? 0 : 1;  // until the parent has looked
    }
    _exit(rc);
  }
  char c = 0;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  {
    auto mine = NvmeStore::open(nvme, "mine", 1 << 20, 2);
    EXPECT_TRUE(fs::exists(dir.file("pstar-live/slots")));
    const std::string what =
        pstar::testing::message_of<IoError>([&] { NvmeStore::open(nvme, "live", 1 << 20, 2); });
    EXPECT_NE(what.find("in use by process " + std::to_string(pid)), std::string::npos) << what;
    EXPECT_NE(what.find(dir.file("pstar-live")), std::string::npos) << what;
  }
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(dir.file("pstar-live")));
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

TEST(NvmeLifetimeTest, AFailedOpenLeavesNoDirectory) {
  pstar::testing::ScratchDir dir;
  EXPECT_THROW(NvmeStore::open(dir.path().string(), "run", int64_t{1} << 40, 1 << 12), IoError);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// Nothing handles the signal before the store: the directory goes, and the process still dies of
// the signal.
TEST(NvmeLifetimeTest, SigtermRemovesTheDirectoryAndStillKills) {
  for (const int sig : {SIGTERM, SIGINT}) {
    pstar::testing::ScratchDir dir;
    const int rc = in_child([&] {
      ::signal(sig, SIG_DFL);
      auto store = NvmeStore::open(dir.path().string(), "run", 1 << 20, 2);
      install_signal_cleanup();  // over whatever an earlier test in this process left
      const AlignedBuffer data = random_buffer(1 << 20, 1);
      store->wait(store->write(1, data.data(), data.bytes()));
      ::raise(sig);
      _exit(5);  // not reached
    });
    EXPECT_EQ(rc, 128 + sig);
    EXPECT_FALSE(fs::exists(dir.file("pstar-run"))) << "signal " << sig;
  }
}

// A child forked without exec inherits the cleanup table; killed, it must not remove the parent's
// directory.
TEST(NvmeLifetimeTest, AForkedChildKilledLeavesItsParentsDirectory) {
  pstar::testing::ScratchDir dir;
  auto store = NvmeStore::open(dir.path().string(), "parent", 1 << 20, 2);
  install_signal_cleanup();
  const int rc = in_child([&] {
    ::raise(SIGTERM);
    _exit(5);
  });
  EXPECT_EQ(rc, 128 + SIGTERM);
  EXPECT_TRUE(fs::exists(store->file_path()));
  const AlignedBuffer data = random_buffer(1 << 20, 2);
  store->wait(store->write(0, data.data(), data.bytes()));
}

volatile sig_atomic_t g_graceful = 0;
void graceful_handler(int) { g_graceful = 1; }
// What core/stop.cpp does on a second signal: stop now, dying of it.
void die_now_handler(int sig) {
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// A graceful-stop handler installed first keeps its say: the run goes on and closes the store
// itself; a handler that chooses to die now still gets the directory removed.
TEST(NvmeLifetimeTest, AnEarlierHandlerIsCalledAndDecidesWhetherTheProcessDies) {
  {
    pstar::testing::ScratchDir dir;
    const std::string run_dir = dir.file("pstar-run");
    const int rc = in_child([&] {
      ::signal(SIGINT, graceful_handler);
      auto store = NvmeStore::open(dir.path().string(), "run", 1 << 20, 2);
      install_signal_cleanup();
      ::raise(SIGINT);
      if (g_graceful != 1 || !fs::exists(run_dir)) _exit(6);  // still running, directory there
      store.reset();
      _exit(fs::exists(run_dir) ? 7 : 0);
    });
    EXPECT_EQ(rc, 0);
    EXPECT_FALSE(fs::exists(run_dir));
  }
  {
    pstar::testing::ScratchDir dir;
    const std::string run_dir = dir.file("pstar-run");
    const int rc = in_child([&] {
      ::signal(SIGINT, die_now_handler);
      auto store = NvmeStore::open(dir.path().string(), "run", 1 << 20, 2);
      install_signal_cleanup();
      ::raise(SIGINT);
      _exit(5);  // not reached
    });
    EXPECT_EQ(rc, 128 + SIGINT);
    EXPECT_FALSE(fs::exists(run_dir));
  }
}

}  // namespace
}  // namespace pstar::nvme
