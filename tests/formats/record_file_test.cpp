// Record files (Note [record file]): round trips, the byte layout against a hand-built file, and
// damaged, truncated and foreign files refused with a FormatError naming the file before any
// record is read.
#include "pstar/formats/record_file.h"

#include <gtest/gtest.h>

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

namespace fs = std::filesystem;
using pstar::testing::message_of;
using pstar::testing::read_bytes;
using pstar::testing::write_bytes;

struct Record {
  std::vector<uint32_t> tokens;  // record_token() values
  int64_t line;
};

std::vector<Record> sample_records() {
  return {
      {{record_token(1, false), record_token(2, true), record_token(16777215, true)}, 1},
      {{}, 3},  // an empty record keeps its place
      {{record_token(0, true)}, 4},
      {{record_token(128000, false), record_token(9, false), record_token(10, true),
        record_token(128009, true)},
       7},
  };
}

void write(const std::string& path, const std::vector<Record>& records,
           const std::string& metadata) {
  RecordFileWriter writer(path);
  for (const Record& r : records) writer.add(r.tokens, r.line);
  writer.commit(metadata);
}

void expect_reads_back(const RecordFile& file, const std::vector<Record>& records,
                       const std::string& metadata) {
  ASSERT_EQ(file.records(), static_cast<int64_t>(records.size()));
  int64_t total = 0;
  for (size_t r = 0; r < records.size(); ++r) {
    const auto i = static_cast<int64_t>(r);
    ASSERT_EQ(file.size(i), static_cast<int64_t>(records[r].tokens.size()));
    EXPECT_EQ(file.offset(i), total);
    EXPECT_EQ(file.line(i), records[r].line);
    std::vector<uint32_t> got(records[r].tokens.size());
    file.read(i, 0, file.size(i), got.data());
    EXPECT_EQ(got, records[r].tokens);
    for (int64_t k = 0; k < file.size(i); ++k) EXPECT_EQ(file.at(i, k), got[k]);
    total += file.size(i);
  }
  EXPECT_EQ(file.tokens(), total);
  EXPECT_EQ(file.metadata(), metadata);
}

TEST(RecordTokenTest, IdAndFlagShareOneWord) {
  EXPECT_EQ(record_token(5, true), 0x80000005u);
  EXPECT_EQ(record_token_id(record_token(16777215, true)), 16777215u);
  EXPECT_TRUE(record_token_counts(record_token(0, true)));
  EXPECT_FALSE(record_token_counts(record_token(128009, false)));
}

TEST(RecordFileTest, RoundTripsRecordsLinesAndMetadata) {
  pstar::testing::ScratchDir dir;
  const std::string path = dir.file("r.records");
  const std::string metadata = R"({"skipped": {"not JSON": 2}, "ü": 1})";
  write(path, sample_records(), metadata);
  expect_reads_back(RecordFile(path), sample_records(), metadata);
  // Partial reads.
  const RecordFile file(path);
  uint32_t two[2];
  file.read(3, 1, 2, two);
  EXPECT_EQ(two[0], record_token(9, false));
  EXPECT_EQ(two[1], record_token(10, true));

  write(path, {}, "");  // no records at all is a valid file
  expect_reads_back(RecordFile(path), {}, "");
}

// The layout of Note [record file], built here byte by byte from the note, not by the writer.
TEST(RecordFileTest, LayoutIsTheDocumentedOne) {
  pstar::testing::ScratchDir dir;
  const std::string path = dir.file("r.records");
  write(path, {{{record_token(7, true), record_token(8, false), record_token(9, true)}, 5}}, "ab");
  std::vector<uint8_t> payload;
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) payload.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(0x80000007u, 4);
  put(8, 4);
  put(0x80000009u, 4);
  put(0, 4);  // padding to 8
  put(0, 8);  // offsets
  put(3, 8);
  put(5, 8);  // lines
  payload.push_back('a');
  payload.push_back('b');
  for (int i = 0; i < 6; ++i) payload.push_back(0);
  std::vector<uint8_t> header(64, 0);
  std::memcpy(header.data(), "PSTARREC", 8);
  auto set = [&](size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) header[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  set(8, 1, 4);
  set(12, 64, 4);
  set(16, 1, 8);
  set(24, 3, 8);
  set(32, 2, 8);
  set(40, payload.size(), 8);
  set(48, ::crc32(0, payload.data(), static_cast<uInt>(payload.size())), 4);
  set(60, ::crc32(0, header.data(), 60), 4);
  std::vector<uint8_t> expected = header;
  expected.insert(expected.end(), payload.begin(), payload.end());
  EXPECT_EQ(read_bytes(path), expected);
}

class DamagedRecordFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("r.records");
    write(path_, sample_records(), "meta");
    bytes_ = read_bytes(path_);
  }
  // The FormatError reading `bytes` gives; it must name the file.
  std::string refusal(const std::vector<uint8_t>& bytes) {
    write_bytes(path_, bytes);
    const std::string message = message_of<FormatError>([&] { RecordFile file(path_); });
    EXPECT_NE(message.find("record file '" + path_ + "'"), std::string::npos) << message;
    return message;
  }
  pstar::testing::ScratchDir dir_;
  std::string path_;
  std::vector<uint8_t> bytes_;
};

TEST_F(DamagedRecordFileTest, EveryFlippedPayloadByteFailsTheCrc) {
  for (size_t at = 64; at < bytes_.size(); ++at) {
    std::vector<uint8_t> damaged = bytes_;
    damaged[at] ^= 0x10;
    const std::string message = refusal(damaged);
    EXPECT_NE(message.find("payload fails its CRC-32"), std::string::npos) << at << ": " << message;
  }
}

TEST_F(DamagedRecordFileTest, EveryFlippedHeaderByteIsRefused) {
  for (size_t at = 0; at < 64; ++at) {
    std::vector<uint8_t> damaged = bytes_;
    damaged[at] ^= 0x01;
    (void)refusal(damaged);
  }
  std::vector<uint8_t> damaged = bytes_;
  damaged[20] ^= 0x01;  // the record count
  EXPECT_NE(refusal(damaged).find("header fails its CRC-32"), std::string::npos);
}

TEST_F(DamagedRecordFileTest, TruncatedOrExtendedFilesAreRefused) {
  for (size_t keep :
       {size_t{0}, size_t{10}, size_t{63}, size_t{64}, bytes_.size() - 8, bytes_.size() - 1}) {
    const std::string message =
        refusal(std::vector<uint8_t>(bytes_.begin(), bytes_.begin() + keep));
    EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                message.find("shorter than its 64-byte header") != std::string::npos)
        << keep << ": " << message;
  }
  std::vector<uint8_t> longer = bytes_;
  longer.push_back(0);
  EXPECT_NE(refusal(longer).find("bytes after its end"), std::string::npos);
}

TEST_F(DamagedRecordFileTest, ForeignFilesAreRefusedByTheirMagic) {
  std::vector<uint8_t> text(100, 'x');
  EXPECT_NE(refusal(text).find("not a pstar record file"), std::string::npos);
}

TEST(RecordFileTest, WriterRefusesIdsOf2To24AndPublishesNothingUnlessCommitted) {
  pstar::testing::ScratchDir dir;
  const std::string path = dir.file("r.records");
  {
    RecordFileWriter writer(path);
    writer.add({record_token(1, true)}, 1);
    const std::string message = message_of<FormatError>([&] {
      writer.add({record_token(2, false), 1u << 24}, 9);
    });
    EXPECT_NE(message.find("token 1 of record 2 (line 9) has id 16777216, not below 2^24"),
              std::string::npos)
        << message;
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir.path()));  // no temporary left behind either
}

TEST(RecordFileTest, MissingFileIsAnIoError) {
  pstar::testing::ScratchDir dir;
  EXPECT_THROW(RecordFile(dir.file("absent.records")), IoError);
}

}  // namespace
}  // namespace pstar::formats
