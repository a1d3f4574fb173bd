// Tests of token files: dtype names, round trips, the little-endian layout and the error cases.
// Every test builds its own small files in a fresh directory under ::testing::TempDir().
#include "pstar/formats/token_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

namespace fs = std::filesystem;

class TokenFileTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.file(name); }
  pstar::testing::ScratchDir scratch_;
};

using pstar::testing::message_of;
using pstar::testing::read_bytes;
using pstar::testing::write_bytes;

TEST(TokenDTypeTest, ParsesValidNames) {
  EXPECT_EQ(parse_token_dtype("uint16", "data.dtype"), TokenDType::kU16);
  EXPECT_EQ(parse_token_dtype("uint32", "data.dtype"), TokenDType::kU32);
  EXPECT_EQ(token_dtype_size(TokenDType::kU16), 2u);
  EXPECT_EQ(token_dtype_size(TokenDType::kU32), 4u);
}

TEST(TokenDTypeTest, UnknownNameIsConfigErrorNamingWhatAndValidNames) {
  for (const std::string bad : {"int16", "u16", "", "UINT16"}) {
    const std::string msg = message_of<ConfigError>([&] { parse_token_dtype(bad, "data.dtype"); });
    EXPECT_NE(msg.find("data.dtype"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + bad + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("uint16, uint32"), std::string::npos) << msg;
  }
}

TEST_F(TokenFileTest, RoundTripUint16) {
  const std::vector<uint32_t> tokens = {0, 1, 255, 256, 50256, 65535, 7};
  write_token_file(path("t16.bin"), TokenDType::kU16, tokens);
  EXPECT_EQ(fs::file_size(path("t16.bin")), tokens.size() * 2);

  TokenFile file(path("t16.bin"), TokenDType::kU16);
  EXPECT_EQ(file.path(), path("t16.bin"));
  ASSERT_EQ(file.size(), static_cast<int64_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(file.at(static_cast<int64_t>(i)), tokens[i]) << i;
  }
  EXPECT_EQ(file.max_token(), 65535u);
}

TEST_F(TokenFileTest, RoundTripUint32) {
  const std::vector<uint32_t> tokens = {70000, 0, 4294967295u, 65536, 3};
  write_token_file(path("t32.bin"), TokenDType::kU32, tokens);
  EXPECT_EQ(fs::file_size(path("t32.bin")), tokens.size() * 4);

  TokenFile file(path("t32.bin"), TokenDType::kU32);
  ASSERT_EQ(file.size(), static_cast<int64_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(file.at(static_cast<int64_t>(i)), tokens[i]) << i;
  }
  EXPECT_EQ(file.max_token(), 4294967295u);
}

TEST_F(TokenFileTest, LayoutIsLittleEndian) {
  write_token_file(path("le16"), TokenDType::kU16, {0x0102, 0xa0b0});
  EXPECT_EQ(read_bytes(path("le16")), (std::vector<uint8_t>{0x02, 0x01, 0xb0, 0xa0}));
  write_token_file(path("le32"), TokenDType::kU32, {0x01020304});
  EXPECT_EQ(read_bytes(path("le32")), (std::vector<uint8_t>{0x04, 0x03, 0x02, 0x01}));

  // Files written by other tools (e.g. numpy's tofile) read back the same way.
  write_bytes(path("raw"), {0x34, 0x12, 0xff, 0xff});
  TokenFile file(path("raw"), TokenDType::kU16);
  EXPECT_EQ(file.at(0), 0x1234u);
  EXPECT_EQ(file.at(1), 0xffffu);
}

TEST_F(TokenFileTest, MaxTokenAndFindTokenAtLeast) {
  write_token_file(path("t"), TokenDType::kU16, {5, 3, 900, 12, 900, 40000, 2});
  TokenFile file(path("t"), TokenDType::kU16);
  EXPECT_EQ(file.max_token(), 40000u);
  EXPECT_EQ(file.find_token_at_least(0), 0);
  EXPECT_EQ(file.find_token_at_least(6), 2);
  EXPECT_EQ(file.find_token_at_least(900), 2);
  EXPECT_EQ(file.find_token_at_least(901), 5);
  EXPECT_EQ(file.find_token_at_least(40000), 5);
  EXPECT_EQ(file.find_token_at_least(40001), -1);
}

TEST_F(TokenFileTest, EmptyFileHasNoTokens) {
  write_token_file(path("empty"), TokenDType::kU32, {});
  TokenFile file(path("empty"), TokenDType::kU32);
  EXPECT_EQ(file.size(), 0);
  EXPECT_EQ(file.max_token(), 0u);
  EXPECT_EQ(file.find_token_at_least(0), -1);
}

TEST_F(TokenFileTest, SizeNotAMultipleOfTokenSizeIsFormatError) {
  write_bytes(path("odd.bin"), {1, 2, 3, 4, 5});
  std::string msg =
      message_of<FormatError>([&] { TokenFile file(path("odd.bin"), TokenDType::kU16); });
  EXPECT_NE(msg.find(path("odd.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("uint16"), std::string::npos) << msg;

  write_bytes(path("six.bin"), {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(TokenFile(path("six.bin"), TokenDType::kU16).size(), 3);
  msg = message_of<FormatError>([&] { TokenFile file(path("six.bin"), TokenDType::kU32); });
  EXPECT_NE(msg.find(path("six.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("6 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("uint32"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, MissingFileIsIoErrorNamingPath) {
  const std::string msg =
      message_of<IoError>([&] { TokenFile file(path("absent.bin"), TokenDType::kU16); });
  EXPECT_NE(msg.find(path("absent.bin")), std::string::npos) << msg;
}

TEST_F(TokenFileTest, WriteRejectsTokenThatDoesNotFitUint16) {
  const std::string msg = message_of<ConfigError>([&] {
    write_token_file(path("t"), TokenDType::kU16, {1, 65535, 65536, 2});
  });
  EXPECT_NE(msg.find(path("t")), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 65536 at index 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("uint16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use uint32"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("t")));
}

TEST_F(TokenFileTest, FailedWriteKeepsOldFile) {
  write_token_file(path("t"), TokenDType::kU16, {1, 2, 3});
  EXPECT_THROW(write_token_file(path("t"), TokenDType::kU16, {70000}), ConfigError);
  TokenFile file(path("t"), TokenDType::kU16);
  EXPECT_EQ(file.size(), 3);
  EXPECT_EQ(file.at(2), 3u);
}

TEST_F(TokenFileTest, WriterInPiecesGivesTheSameFileAndPublishesOnlyOnCommit) {
  write_token_file(path("whole"), TokenDType::kU32, {7, 70000, 0, 9});
  {
    TokenFileWriter writer(path("pieces"), TokenDType::kU32);
    writer.append({7, 70000});
    writer.append({});
    writer.append({0, 9});
    EXPECT_EQ(writer.size(), 4);
    EXPECT_EQ(writer.size_bytes(), 16u);
    EXPECT_FALSE(fs::exists(path("pieces")));
    writer.commit();
  }
  EXPECT_EQ(read_bytes(path("pieces")), read_bytes(path("whole")));
  // A token that does not fit: its index counts the pieces before it; nothing is published.
  {
    TokenFileWriter writer(path("bad"), TokenDType::kU16);
    writer.append({1, 2, 3});
    const std::string msg = message_of<ConfigError>([&] { writer.append({4, 65536}); });
    EXPECT_NE(msg.find("token 65536 at index 4"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(path("bad")));
}

TEST_F(TokenFileTest, OutOfRangeIndexIsInternalError) {
  write_token_file(path("t"), TokenDType::kU16, {1});
  TokenFile file(path("t"), TokenDType::kU16);
  EXPECT_THROW(file.at(1), InternalError);
  EXPECT_THROW(file.at(-1), InternalError);
}

}  // namespace
}  // namespace pstar::formats
