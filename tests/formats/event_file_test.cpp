// TensorBoard event files (formats/event_file.h): CRC-32C against published vectors, the TFRecord
// framing and the Event encoding byte for byte, and the writer's file: its name, its first record,
// and a failed write that leaves the file whole.
#include "pstar/formats/event_file.h"

#include <signal.h>
#include <sys/resource.h>

#include <cstdint>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "event_file_reader.h"
#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

namespace fs = std::filesystem;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

// RFC 3720 (iSCSI), appendix B.4, and the check value of CRC-32C over "123456789".
TEST(Crc32cTest, MatchesPublishedVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xe3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46dd794eu);
  EXPECT_EQ(crc32c(descending.data(), descending.size()), 0x113fdb5cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // Continued over pieces, the same as over the whole.
  EXPECT_EQ(crc32c(check.data() + 4, 5, crc32c(check.data(), 4)), 0xe3069283u);
}

TEST(Crc32cTest, MaskRotatesAndAddsTheConstant) {
  const std::string check = "123456789";
  // ((0xe3069283 >> 15) | (0xe3069283 << 17)) + 0xa282ead8, modulo 2^32.
  EXPECT_EQ(masked_crc32c(check.data(), check.size()), 0xc78ab0e5u);
}

TEST(EventFileTest, RecordFramesItsPayload) {
  const std::string record = tfrecord("abc");
  // uint64 length 3, masked CRC-32C of those 8 bytes, the payload, masked CRC-32C of it; the CRCs
  // were computed by tests/cmd/tensorboard_reader.py's own CRC-32C.
  EXPECT_EQ(record, bytes({3, 0, 0, 0, 0, 0, 0, 0, 0xb0, 0x99, 0x49, 0x0e, 'a', 'b', 'c', 0x6e,
                           0x57, 0xf1, 0x21}));
  EXPECT_EQ(tfrecord("").size(), 16u);
}

// The protobuf encodings, written out by hand from the field numbers of Note [event file].
TEST(EventFileTest, FileVersionEventBytes) {
  // wall_time 1.5 (field 1, fixed64), step 0 (field 2, varint), file_version (field 3, 13 bytes).
  EXPECT_EQ(file_version_event(1.5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0, 0x1a, 13}) + "brain.Event:2");
}

TEST(EventFileTest, ScalarsEventBytes) {
  const std::string value = bytes({0x0a, 3}) + "a/b" + bytes({0x15, 0, 0, 0, 0x3f});  // tag, 0.5f
  const std::string summary = bytes({0x0a, static_cast<int>(value.size())}) + value;
  EXPECT_EQ(scalars_event(2.0, 300, {{"a/b", 0.5f}}),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x10, 0xac, 0x02, 0x2a,
                   static_cast<int>(summary.size())}) +
                summary);
  // A negative step is its two's complement in ten varint bytes.
  const std::string negative = scalars_event(0.0, -1, {});
  EXPECT_EQ(negative.substr(9, 11),
            bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
}

TEST(EventFileTest, TextAndSessionStartEvents) {
  const auto text = pstar::testing::decode_event(text_event(3.0, 0, "config", "hello"));
  ASSERT_EQ(text.texts.size(), 1u);
  EXPECT_EQ(text.texts[0].first, "config");
  EXPECT_EQ(text.texts[0].second, "hello");
  EXPECT_TRUE(text.scalars.empty());
  // Value: tag (1), metadata (9) {plugin_data (1) {plugin_name (1) "text"}, data_class (4) 2},
  // tensor (8) {dtype (1) 7, tensor_shape (2) empty, string_val (8)}.
  const std::string want = bytes({0x0a, 6}) + "config" + bytes({0x4a, 10, 0x0a, 6, 0x0a, 4}) +
                           "text" + bytes({0x20, 2, 0x42, 11, 0x08, 7, 0x12, 0, 0x42, 5}) + "hello";
  const std::string event = text_event(3.0, 0, "config", "hello");
  // After wall_time and step: Summary (field 5) { value (1) { want } }.
  EXPECT_EQ(
      event.substr(11),
      bytes({0x2a, static_cast<int>(want.size()) + 2, 0x0a, static_cast<int>(want.size())}) + want);
  const auto start = pstar::testing::decode_event(session_start_event(4.0, 7));
  EXPECT_TRUE(start.session_start);
  EXPECT_EQ(start.step, 7);
  EXPECT_EQ(start.wall_time, 4.0);
}

TEST(EventFileTest, NameIsTheOneTensorBoardLooksFor) {
  EXPECT_EQ(event_file_name(1700000000, "node-3", 4242),
            "events.out.tfevents.1700000000.node-3.pstar.4242");
}

TEST(EventFileWriterTest, CreatesTheDirectoryAndWritesTheVersionFirst) {
  ScratchDir dir;
  const std::string where = dir.file("runs/a");
  EventFileWriter writer(where, "training.tensorboard_dir");
  EXPECT_EQ(fs::path(writer.path()).parent_path(), fs::path(where));
  EXPECT_TRUE(std::regex_match(fs::path(writer.path()).filename().string(),
                               std::regex(R"(events\.out\.tfevents\.[0-9]+\..+\.pstar\.[0-9]+)")))
      << writer.path();
  auto events = pstar::testing::read_events(writer.path());
  ASSERT_EQ(events.size(), 1u);  // written at once, before anything is flushed
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);

  writer.add(scalars_event(1.0, 1, {{"train/loss", 2.5f}}));
  writer.add(scalars_event(1.0, 2, {{"train/loss", 2.0f}}));
  EXPECT_EQ(writer.queued_records(), 2);
  EXPECT_EQ(pstar::testing::read_events(writer.path()).size(), 1u);  // queued, not written
  writer.flush();
  EXPECT_EQ(writer.queued_records(), 0);
  events = pstar::testing::read_events(writer.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].step, 2);
  ASSERT_EQ(events[2].scalars.size(), 1u);
  EXPECT_EQ(events[2].scalars[0].second, 2.0f);

  // A second writer in the same second and process takes a name of its own.
  EventFileWriter second(where, "training.tensorboard_dir");
  EXPECT_NE(second.path(), writer.path());
  EXPECT_EQ(pstar::testing::read_events(writer.path()).size(), 3u);
}

TEST(EventFileWriterTest, DirectoryThatCannotBeMadeIsAnIoErrorNamingTheKey) {
  ScratchDir dir;
  pstar::testing::write_text(dir.file("file"), "not a directory");
  try {
    EventFileWriter writer(dir.file("file/runs"), "training.tensorboard_dir");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("training.tensorboard_dir"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.file("file/runs")), std::string::npos) << e.what();
  }
}

// A write that fails part-way (here the file-size limit, as a full disk would) cuts the file back
// to its last whole record: it stays readable, and later records follow it.
TEST(EventFileWriterTest, FailedWriteLeavesWholeRecords) {
  ScratchDir dir;
  EventFileWriter writer(dir.path().string(), "training.tensorboard_dir");
  const auto before = fs::file_size(writer.path());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_IGN);
  rlimit tight = old;
  tight.rlim_cur = before + 20;  // part of the next record
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tight), 0);
  writer.add(scalars_event(1.0, 1, {{"train/loss", 2.5f}, {"train/lr", 0.1f}}));
  std::string message;
  try {
    writer.flush();
  } catch (const IoError& e) {
    message = e.what();
  }
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_NE(message.find(writer.path()), std::string::npos) << message;
  EXPECT_NE(message.find("1 record lost"), std::string::npos) << message;
  EXPECT_EQ(fs::file_size(writer.path()), before);
  EXPECT_EQ(writer.queued_records(), 0);
  writer.add(scalars_event(1.0, 2, {{"train/loss", 2.0f}}));
  writer.flush();
  const auto events = pstar::testing::read_events(writer.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 2);
}

}  // namespace
}  // namespace pstar::formats
