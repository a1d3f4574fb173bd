// The NVMe store moves bytes faithfully on both backends, and its checksums catch damage.
#include "pstar/nvme/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "nvme_test_util.h"
#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::nvme {
namespace {

using testing::BackendTest;
using testing::random_buffer;
using testing::same_bytes;

// Slots not a multiple of the alignment or of the 1 MiB request, so each moves as several requests
// and a padded tail.
constexpr int64_t kSlotBytes = 3 * (1 << 20) + 5000;
constexpr int64_t kSlots = 24;

TEST_P(BackendTest, ManySlotsReadBackAsWrittenWithReadsAndWritesInterleaved) {
  pstar::testing::ScratchDir dir;
  auto store = NvmeStore::open(dir.path().string(), "run", kSlotBytes, kSlots, options());
  EXPECT_EQ(store->backend(), GetParam());
  EXPECT_FALSE(store->backend_reason().empty());

  std::vector<AlignedBuffer> data;
  std::vector<Ticket> tickets;
  for (int64_t s = 0; s < kSlots; ++s) {
    // Slot sizes vary: a write may hold less than a whole slot.
    const int64_t bytes = s % 3 == 0 ? kSlotBytes : kSlotBytes - 4096 * s - 7;
    data.push_back(random_buffer(bytes, static_cast<uint32_t>(s)));
    tickets.push_back(store->write(s, data.back().data(), bytes));
  }
  for (const Ticket& t : tickets) store->wait(t);

  // Round two: odd slots are rewritten while even ones are read back, all in flight at once.
  std::vector<AlignedBuffer> got;
  std::vector<std::pair<Ticket, int64_t>> reads;
  tickets.clear();
  for (int64_t s = 0; s < kSlots; ++s) {
    if (s % 2 == 1) {
      data[s] = random_buffer(data[s].bytes(), static_cast<uint32_t>(1000 + s));
      tickets.push_back(store->write(s, data[s].data(), data[s].bytes()));
    } else {
      got.emplace_back(data[s].bytes());
      reads.emplace_back(store->read(s, got.back().data(), data[s].bytes()), s);
    }
  }
  for (const Ticket& t : tickets) store->wait(t);
  size_t g = 0;
  for (const auto& [t, s] : reads) {
    store->wait(t);
    EXPECT_TRUE(same_bytes(got[g++], data[s], data[s].bytes())) << "slot " << s;
  }
  // Round three: every slot read back, the rewritten ones included.
  int64_t read_bytes = 0;
  for (int64_t s = 0; s < kSlots; ++s) {
    AlignedBuffer back(data[s].bytes());
    store->wait(store->read(s, back.data(), data[s].bytes()));
    EXPECT_TRUE(same_bytes(back, data[s], data[s].bytes())) << "slot " << s;
    read_bytes += data[s].bytes();
  }
  for (const auto& [t, s] : reads) read_bytes += data[s].bytes();
  const IoStats stats = store->stats();
  EXPECT_EQ(stats.reads, kSlots + kSlots / 2);
  EXPECT_EQ(stats.writes, kSlots + kSlots / 2);
  EXPECT_EQ(stats.read_bytes, read_bytes);
}

TEST_P(BackendTest, QueueDepthOneAndSmallRequestsMoveTheSameBytes) {
  pstar::testing::ScratchDir dir;
  StoreOptions o = options();
  o.queue_depth = 1;
  o.request_bytes = 8192;
  auto store = NvmeStore::open(dir.path().string(), "run", 100000, 3, o);
  const AlignedBuffer a = random_buffer(100000, 1), b = random_buffer(99999, 2);
  const Ticket ta = store->write(0, a.data(), a.bytes());
  const Ticket tb = store->write(2, b.data(), b.bytes());
  store->wait(tb);
  store->wait(ta);
  AlignedBuffer back_a(a.bytes()), back_b(b.bytes());
  const Ticket ra = store->read(0, back_a.data(), a.bytes());
  const Ticket rb = store->read(2, back_b.data(), b.bytes());
  store->wait(ra);
  store->wait(rb);
  EXPECT_TRUE(same_bytes(back_a, a, a.bytes()));
  EXPECT_TRUE(same_bytes(back_b, b, b.bytes()));
}

// A byte changed on disk behind the store's back is caught by the slot's checksum, and only by it.
TEST_P(BackendTest, ChecksumCatchesADamagedSlot) {
  for (const bool checksums : {true, false}) {
    pstar::testing::ScratchDir dir;
    StoreOptions o = options();
    o.checksums = checksums;
    auto store = NvmeStore::open(dir.path().string(), "run", 1 << 20, 4, o);
    const AlignedBuffer data = random_buffer(1 << 20, 7);
    store->wait(store->write(2, data.data(), data.bytes()));
    {
      // The file's third slot starts at 2 MiB; flip one byte in the middle of it.
      const int fd = ::open(store->file_path().c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
      const char flipped = static_cast<char>(data.as<char>()[12345] ^ 0x5a);
      ASSERT_EQ(::pwrite(fd, &flipped, 1, 2 * (1 << 20) + 12345), 1);
      ASSERT_EQ(::fsync(fd), 0);
      ::close(fd);
    }
    AlignedBuffer back(data.bytes());
    if (checksums) {
      const std::string what = pstar::testing::message_of<IoError>(
          [&] { store->wait(store->read(2, back.data(), data.bytes())); });
      EXPECT_NE(what.find("slot 2"), std::string::npos) << what;
      EXPECT_NE(what.find("checksum"), std::string::npos) << what;
      EXPECT_NE(what.find(store->file_path()), std::string::npos) << what;
    } else {
      store->wait(store->read(2, back.data(), data.bytes()));
      EXPECT_FALSE(same_bytes(back, data, data.bytes()));  // the damage is really there
      EXPECT_EQ(back.as<char>()[12345], static_cast<char>(data.as<char>()[12345] ^ 0x5a));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest,
                         ::testing::Values(BackendKind::kIoUring, BackendKind::kThreads),
                         testing::backend_param_name);

// The automatic choice takes io_uring with O_DIRECT wherever both work (ext4 here), and says why
// it does not otherwise.
TEST(NvmeStoreTest, AutomaticChoiceIsIoUringWithDirectIoWhereBothWork) {
  pstar::testing::ScratchDir dir;
  auto store = NvmeStore::open(dir.path().string(), "run", 1 << 20, 2);
  std::string why;
  if (!io_uring_available(&why)) {
    EXPECT_EQ(store->backend(), BackendKind::kThreads);
    EXPECT_NE(store->backend_reason().find("io_uring refused"), std::string::npos)
        << store->backend_reason();
    GTEST_SKIP() << "io_uring is refused here (" << why << "): checked the fallback's reason";
  }
  EXPECT_EQ(store->backend(), BackendKind::kIoUring) << store->backend_reason();
  if (store->direct_io()) {
    EXPECT_NE(store->backend_reason().find("O_DIRECT"), std::string::npos);
    EXPECT_EQ(store->alignment() % kDefaultAlignment, 0);
  }
}

TEST(NvmeStoreTest, WithoutDirectIoTheAutomaticChoiceFallsBackToThreadsAndSaysWhy) {
  pstar::testing::ScratchDir dir;
  StoreOptions o;
  o.direct = false;
  auto store = NvmeStore::open(dir.path().string(), "run", 1 << 20, 2, o);
  EXPECT_FALSE(store->direct_io());
  EXPECT_EQ(store->backend(), BackendKind::kThreads);
  EXPECT_NE(store->backend_reason().find("O_DIRECT turned off"), std::string::npos)
      << store->backend_reason();
  const AlignedBuffer data = random_buffer(1 << 20, 3);
  store->wait(store->write(1, data.data(), data.bytes()));
  AlignedBuffer back(data.bytes());
  store->wait(store->read(1, back.data(), data.bytes()));
  EXPECT_TRUE(same_bytes(back, data, data.bytes()));
}

TEST(NvmeStoreTest, ImpossibleOptionsAreConfigErrors) {
  pstar::testing::ScratchDir dir;
  StoreOptions o;
  o.request_bytes = 1000;
  EXPECT_THROW(NvmeStore::open(dir.path().string(), "run", 4096, 1, o), ConfigError);
  o = StoreOptions{};
  o.queue_depth = 0;
  EXPECT_THROW(NvmeStore::open(dir.path().string(), "run", 4096, 1, o), ConfigError);
  EXPECT_THROW(NvmeStore::open(dir.path().string(), "run", 0, 1), ConfigError);
  EXPECT_THROW(NvmeStore::open(dir.path().string(), "a/b", 4096, 1), ConfigError);
}

TEST(AlignedBufferTest, IsAlignedAndRoundedUp) {
  const AlignedBuffer b(5000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kDefaultAlignment, 0u);
  EXPECT_EQ(b.bytes(), 5000);
  EXPECT_EQ(b.capacity(), 8192);
  const AlignedBuffer c(4096, 1 << 16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data()) % (1 << 16), 0u);
  EXPECT_EQ(c.capacity(), 1 << 16);
}

}  // namespace
}  // namespace pstar::nvme
