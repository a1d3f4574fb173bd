// Faults of the NVMe store: each one a clear IoError naming the path, and never a hang.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nvme_test_util.h"
#include "pstar/base/error.h"
#include "pstar/nvme/store.h"
#include "test_util.h"

namespace pstar::nvme {
namespace {

using pstar::testing::message_of;
using testing::random_buffer;
using testing::same_bytes;

class FaultTest : public testing::BackendTest {};

// Eight slots of 4 MiB: 32 requests of 1 MiB per direction, the injected one in the middle of the
// second slot while the others are in flight.
constexpr int64_t kSlotBytes = 4 << 20;
constexpr int kSlots = 8;

struct Written {
  std::vector<AlignedBuffer> data;
};

// Writes every slot and waits for each; returns the message of the first IoError (or "").
std::string write_all(NvmeStore& store, Written& w) {
  std::vector<Ticket> tickets;
  for (int s = 0; s < kSlots; ++s) {
    w.data.push_back(random_buffer(kSlotBytes, static_cast<uint32_t>(s)));
    tickets.push_back(store.write(s, w.data.back().data(), kSlotBytes));
  }
  std::string first;
  for (const Ticket& t : tickets) {
    try {
      store.wait(t);
    } catch (const IoError& e) {
      if (first.empty()) first = e.what();
    }
  }
  return first;
}

TEST_P(FaultTest, EnospcOnAWriteFailsThatSlotNamingTheFileAndTheRestStillWork) {
  pstar::testing::ScratchDir dir;
  StoreOptions o = options();
  o.fault.op = FaultInjection::Op::kWrite;
  o.fault.request = 5;  // slot 1's second request
  o.fault.error = ENOSPC;
  auto store = NvmeStore::open(dir.path().string(), "run", kSlotBytes, kSlots, o);
  Written w;
  const std::string what = write_all(*store, w);
  EXPECT_NE(what.find(strerror(ENOSPC)), std::string::npos) << what;
  EXPECT_NE(what.find("write of slot 1"), std::string::npos) << what;
  EXPECT_NE(what.find(store->file_path()), std::string::npos) << what;
  // Only that slot failed: the others read back whole, and the slot can be written again.
  for (int s = 0; s < kSlots; ++s) {
    if (s == 1) continue;
    AlignedBuffer back(kSlotBytes);
    store->wait(store->read(s, back.data(), kSlotBytes));
    EXPECT_TRUE(same_bytes(back, w.data[s], kSlotBytes)) << "slot " << s;
  }
  store->wait(store->write(1, w.data[1].data(), kSlotBytes));
  AlignedBuffer back(kSlotBytes);
  store->wait(store->read(1, back.data(), kSlotBytes));
  EXPECT_TRUE(same_bytes(back, w.data[1], kSlotBytes));
  EXPECT_EQ(store->stats().writes, kSlots);  // the failed write is not counted
}

TEST_P(FaultTest, EioOnAReadFailsThatRead) {
  pstar::testing::ScratchDir dir;
  StoreOptions o = options();
  o.fault.op = FaultInjection::Op::kRead;
  o.fault.request = 10;  // slot 2's third request, reads queued in order
  o.fault.error = EIO;
  auto store = NvmeStore::open(dir.path().string(), "run", kSlotBytes, kSlots, o);
  Written w;
  ASSERT_EQ(write_all(*store, w), "");
  std::vector<AlignedBuffer> back;
  std::vector<Ticket> tickets;
  for (int s = 0; s < kSlots; ++s) {
    back.emplace_back(kSlotBytes);
    tickets.push_back(store->read(s, back.back().data(), kSlotBytes));
  }
  for (int s = 0; s < kSlots; ++s) {
    if (s == 2) {
      const std::string what = message_of<IoError>([&] { store->wait(tickets[s]); });
      EXPECT_NE(what.find("read of slot 2"), std::string::npos) << what;
      EXPECT_NE(what.find(strerror(EIO)), std::string::npos) << what;
      EXPECT_NE(what.find(store->file_path()), std::string::npos) << what;
    } else {
      store->wait(tickets[s]);
      EXPECT_TRUE(same_bytes(back[s], w.data[s], kSlotBytes)) << "slot " << s;
    }
  }
}

TEST_P(FaultTest, AShortReadIsAnErrorNotSilentlyMissingBytes) {
  pstar::testing::ScratchDir dir;
  StoreOptions o = options();
  o.fault.op = FaultInjection::Op::kRead;
  o.fault.request = 1;
  o.fault.short_bytes = 4096;  // then the end of the file
  auto store = NvmeStore::open(dir.path().string(), "run", kSlotBytes, 1, o);
  const AlignedBuffer data = random_buffer(kSlotBytes, 9);
  store->wait(store->write(0, data.data(), kSlotBytes));
  AlignedBuffer back(kSlotBytes);
  const std::string what =
      message_of<IoError>([&] { store->wait(store->read(0, back.data(), kSlotBytes)); });
  EXPECT_NE(what.find("short read"), std::string::npos) << what;
  EXPECT_NE(what.find(store->file_path()), std::string::npos) << what;
  // The continuation started where the short request stopped: 1 MiB + 4096.
  EXPECT_NE(what.find(std::to_string((1 << 20) + 4096)), std::string::npos) << what;
}

TEST_P(FaultTest, AShortWriteIsAnError) {
  pstar::testing::ScratchDir dir;
  StoreOptions o = options();
  o.fault.op = FaultInjection::Op::kWrite;
  o.fault.request = 0;
  o.fault.short_bytes = 0;  // nothing written: the end of the file at once
  auto store = NvmeStore::open(dir.path().string(), "run", kSlotBytes, 1, o);
  const AlignedBuffer data = random_buffer(kSlotBytes, 9);
  const std::string what =
      message_of<IoError>([&] { store->wait(store->write(0, data.data(), kSlotBytes)); });
  EXPECT_NE(what.find("short write"), std::string::npos) << what;
}

TEST_P(FaultTest, TheDirectoryRemovedMidRunIsAnErrorAtTheNextOperation) {
  pstar::testing::ScratchDir dir;
  auto store = NvmeStore::open(dir.path().string(), "run", 1 << 20, 2, options());
  const AlignedBuffer data = random_buffer(1 << 20, 1);
  store->wait(store->write(0, data.data(), data.bytes()));
  std::filesystem::remove_all(store->directory());
  const std::string what = message_of<IoError>([&] { store->write(1, data.data(), data.bytes()); });
  EXPECT_NE(what.find("was removed"), std::string::npos) << what;
  EXPECT_NE(what.find(store->directory()), std::string::npos) << what;
  AlignedBuffer back(data.bytes());
  EXPECT_THROW(store->read(0, back.data(), data.bytes()), IoError);
  store.reset();  // and closing it does not fail either
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultTest,
                         ::testing::Values(BackendKind::kIoUring, BackendKind::kThreads),
                         testing::backend_param_name);

TEST(NvmeStoreFaultTest, AMissingPathIsAnIoErrorNamingIt) {
  pstar::testing::ScratchDir dir;
  const std::string missing = dir.file("no-such-dir");
  const std::string what = message_of<IoError>([&] { NvmeStore::open(missing, "run", 4096, 1); });
  EXPECT_NE(what.find(missing), std::string::npos) << what;
  EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
}

TEST(NvmeStoreFaultTest, AFileForAPathIsAnIoErrorNamingIt) {
  pstar::testing::ScratchDir dir;
  const std::string file = dir.file("a-file");
  pstar::testing::write_text(file, "x");
  const std::string what = message_of<IoError>([&] { NvmeStore::open(file, "run", 4096, 1); });
  EXPECT_NE(what.find(file), std::string::npos) << what;
  EXPECT_NE(what.find("not a directory"), std::string::npos) << what;
}

TEST(NvmeStoreFaultTest, TooLittleFreeSpaceIsAnIoErrorWithBothFiguresAndLeavesNothing) {
  pstar::testing::ScratchDir dir;
  // 1 PiB: more than any test machine's disk.
  const std::string what = message_of<IoError>(
      [&] { NvmeStore::open(dir.path().string(), "run", int64_t{1} << 30, 1 << 20); });
  EXPECT_NE(what.find("not enough free space"), std::string::npos) << what;
  EXPECT_NE(what.find(dir.path().string()), std::string::npos) << what;
  EXPECT_NE(what.find(std::to_string(int64_t{1} << 50)), std::string::npos) << what;
  EXPECT_NE(what.find("are free"), std::string::npos) << what;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the run directory was left behind";
}

// Note [real file system limits in a namespace]
// A small tmpfs (or a ramfs), mounted in a user and mount namespace of a child process (no root
// needed where unprivileged user namespaces are allowed): a real full disk and a real read-only
// one. The child reports the first failed check on stderr and in its exit code; 77 means the
// namespace was refused.
int in_namespace_with(const char* fs_type, const std::string& mount_point,
                      const char* mount_options, unsigned long flags,
                      void (*body)(const std::string&)) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) _exit(77);
    std::ofstream("/proc/self/setgroups") << "deny";
    std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
    std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
    if (mount("none", mount_point.c_str(), fs_type, flags, mount_options) != 0) _exit(77);
    try {
      body(mount_point);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "unexpected exception: %s\n", e.what());
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define CHILD_CHECK(cond, what)                                              \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "check failed: %s: %s\n", #cond, (what).c_str()); \
      _exit(2);                                                              \
    }                                                                        \
  } while (0)

void full_disk_checks(const std::string& path) {
  // 8 MiB of tmpfs: 16 MiB of slots do not fit, and the message says so with both figures.
  std::string what;
  try {
    NvmeStore::open(path, "big", 1 << 20, 16);
  } catch (const IoError& e) {
    what = e.what();
  }
  CHILD_CHECK(what.find("not enough free space") != std::string::npos, what);
  CHILD_CHECK(what.find(path) != std::string::npos, what);
  // 4 MiB fit. Then the rest of the disk fills up; the slots were reserved at open, so writing
  // them still works (Note [nvme slot file]).
  auto store = NvmeStore::open(path, "small", 1 << 20, 4);
  {
    std::ofstream filler(path + "/filler", std::ios::binary);
    const std::string mib(1 << 20, 'f');
    for (int i = 0; i < 64 && filler.write(mib.data(), mib.size()); ++i) filler.flush();
  }
  const AlignedBuffer data = random_buffer(1 << 20, 5);
  for (int s = 0; s < 4; ++s) store->wait(store->write(s, data.data(), data.bytes()));
  AlignedBuffer back(data.bytes());
  store->wait(store->read(3, back.data(), data.bytes()));
  CHILD_CHECK(same_bytes(back, data, data.bytes()), std::string("slot 3 read back differs"));
  // A second store now finds no space at all: the disk's own ENOSPC (its owner file cannot be
  // written) or the free-space check, at open, naming the path either way.
  what.clear();
  try {
    NvmeStore::open(path, "late", 1 << 20, 1);
  } catch (const IoError& e) {
    what = e.what();
  }
  CHILD_CHECK(what.find(path) != std::string::npos, what);
  CHILD_CHECK(what.find(std::strerror(ENOSPC)) != std::string::npos ||
                  what.find("not enough free space") != std::string::npos,
              what);
  CHILD_CHECK(!std::filesystem::exists(path + "/pstar-late"), what);
}

void read_only_checks(const std::string& path) {
  std::string what;
  try {
    NvmeStore::open(path, "run", 1 << 20, 1);
  } catch (const IoError& e) {
    what = e.what();
  }
  CHILD_CHECK(what.find("cannot create") != std::string::npos, what);
  CHILD_CHECK(what.find(path) != std::string::npos, what);
  CHILD_CHECK(what.find("Read-only file system") != std::string::npos, what);
}

void no_direct_io_checks(const std::string& path) {
  // ramfs refuses O_DIRECT (EINVAL at open): the automatic choice falls back to buffered
  // pread/pwrite threads and says why, and the bytes still come back.
  auto store = NvmeStore::open(path, "run", 3 << 20, 2);
  CHILD_CHECK(!store->direct_io(), store->backend_reason());
  CHILD_CHECK(store->backend() == BackendKind::kThreads, store->backend_reason());
  CHILD_CHECK(store->backend_reason().find("O_DIRECT refused") != std::string::npos,
              store->backend_reason());
  const AlignedBuffer data = random_buffer(3 << 20, 4);
  store->wait(store->write(1, data.data(), data.bytes()));
  AlignedBuffer back(data.bytes());
  store->wait(store->read(1, back.data(), data.bytes()));
  CHILD_CHECK(same_bytes(back, data, data.bytes()), std::string("slot 1 read back differs"));
}

TEST(NvmeStoreFaultTest, AFileSystemWithoutDirectIoFallsBackToBufferedThreads) {
  pstar::testing::ScratchDir dir;
  const int rc = in_namespace_with("ramfs", dir.path().string(), "", 0, no_direct_io_checks);
  if (rc == 77) GTEST_SKIP() << "no user and mount namespace for a ramfs here";
  EXPECT_EQ(rc, 0) << "the child's checks failed (its stderr says which)";
}

TEST(NvmeStoreFaultTest, ARealFullDiskIsFoundAtOpenAndReservedSlotsStillWrite) {
  pstar::testing::ScratchDir dir;
  const int rc = in_namespace_with("tmpfs", dir.path().string(), "size=8m", 0, full_disk_checks);
  if (rc == 77)
    GTEST_SKIP() << "no user and mount namespace for a small tmpfs here; the injected ENOSPC tests "
                    "cover the error path";
  EXPECT_EQ(rc, 0) << "the child's checks failed (its stderr says which)";
}

TEST(NvmeStoreFaultTest, AReadOnlyPathIsAnIoErrorNamingIt) {
  pstar::testing::ScratchDir dir;
  const int rc =
      in_namespace_with("tmpfs", dir.path().string(), "size=1m", MS_RDONLY, read_only_checks);
  if (rc == 77) GTEST_SKIP() << "no user and mount namespace for a read-only tmpfs here";
  EXPECT_EQ(rc, 0) << "the child's checks failed (its stderr says which)";
}

}  // namespace
}  // namespace pstar::nvme
