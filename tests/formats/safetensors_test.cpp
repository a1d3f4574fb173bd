// Tests of the safetensors reader and writer (MappedFile and write_file_atomic are in
// file_io_test.cpp). Every test builds its own small files in a fresh directory under
// ::testing::TempDir().
#include "pstar/formats/safetensors.h"

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
#include "pstar/formats/mapped_file.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

namespace fs = std::filesystem;

using pstar::formats::file_testing::FormatsFileTest;

using pstar::testing::message_of;
using pstar::testing::read_bytes;
using pstar::testing::write_bytes;

// A safetensors file from raw header text and `data_bytes` bytes of data (value i % 251).
std::vector<uint8_t> raw_safetensors(const std::string& header, uint64_t data_bytes) {
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + n + data_bytes);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  for (uint64_t i = 0; i < n; ++i) out[8 + i] = static_cast<uint8_t>(header[i]);
  for (uint64_t i = 0; i < data_bytes; ++i) out[8 + n + i] = static_cast<uint8_t>(i % 251);
  return out;
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// safetensors: round trips

using SafetensorsTest = FormatsFileTest;

TEST(SafetensorsDTypeTest, NamesAndSizes) {
  const std::vector<std::pair<DType, std::pair<std::string, size_t>>> expected = {
      {DType::kF64, {"F64", 8}},   {DType::kF32, {"F32", 4}}, {DType::kF16, {"F16", 2}},
      {DType::kBF16, {"BF16", 2}}, {DType::kI64, {"I64", 8}}, {DType::kI32, {"I32", 4}},
      {DType::kI16, {"I16", 2}},   {DType::kI8, {"I8", 1}},   {DType::kU8, {"U8", 1}},
      {DType::kBool, {"BOOL", 1}}, {DType::kU16, {"U16", 2}}, {DType::kU32, {"U32", 4}},
      {DType::kU64, {"U64", 8}}};
  for (const auto& [dtype, name_size] : expected) {
    EXPECT_EQ(dtype_name(dtype), name_size.first);
    EXPECT_EQ(dtype_size(dtype), name_size.second) << name_size.first;
  }
}

struct TestTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<TestTensor> sample_tensors() {
  return {
      {"f32.matrix", DType::kF32, {2, 3}, as_bytes(std::vector<float>{1, -2, 3.5f, 4, 5, 6})},
      {"f64.scalar", DType::kF64, {}, as_bytes(std::vector<double>{3.25})},
      {"bf16.vec", DType::kBF16, {4}, as_bytes(std::vector<uint16_t>{0x3f80, 0x4000, 0, 0xbf80})},
      {"f16.empty", DType::kF16, {0, 4}, {}},
      {"i64.pair", DType::kI64, {2, 1}, as_bytes(std::vector<int64_t>{-1, INT64_MAX})},
      {"i8.odd", DType::kI8, {3}, as_bytes(std::vector<int8_t>{-128, 0, 127})},
      {"u8.cube", DType::kU8, {3, 1, 2}, {1, 2, 3, 4, 5, 6}},
      {"bool.mask", DType::kBool, {5}, {1, 0, 1, 1, 0}},
      {"u16.one", DType::kU16, {1}, as_bytes(std::vector<uint16_t>{65535})},
      {"i32.two", DType::kI32, {2}, as_bytes(std::vector<int32_t>{-7, 7})},
      {"u32.two", DType::kU32, {1, 2}, as_bytes(std::vector<uint32_t>{0, 4000000000u})},
      {"i16.one", DType::kI16, {1}, as_bytes(std::vector<int16_t>{-300})},
      {"u64.one", DType::kU64, {1}, as_bytes(std::vector<uint64_t>{UINT64_MAX})},
      {"a.zero.at.start", DType::kF32, {0}, {}},
  };
}

TEST_F(SafetensorsTest, RoundTripOfEveryDTypeScalarAndZeroSizeTensors) {
  const std::vector<TestTensor> tensors = sample_tensors();
  SafetensorsWriter writer;
  for (const TestTensor& t : tensors) {
    writer.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  }
  writer.write(path("model.safetensors"));

  SafetensorsReader reader(path("model.safetensors"));
  EXPECT_EQ(reader.path(), path("model.safetensors"));
  ASSERT_EQ(reader.tensors().size(), tensors.size());
  EXPECT_TRUE(reader.metadata().empty());
  for (const TestTensor& t : tensors) {
    SCOPED_TRACE(t.name);
    const TensorInfo* info = reader.find(t.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->name, t.name);
    EXPECT_EQ(info->dtype, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    EXPECT_EQ(info->size_bytes, t.bytes.size());
    EXPECT_EQ(static_cast<size_t>(info->numel()) * dtype_size(t.dtype), t.bytes.size());
    const uint8_t* data = reader.data(*info);
    EXPECT_EQ(std::vector<uint8_t>(data, data + info->size_bytes), t.bytes);
  }
  EXPECT_EQ(reader.find("f64.scalar")->numel(), 1);
  EXPECT_EQ(reader.find("f16.empty")->numel(), 0);
  EXPECT_EQ(reader.find("missing"), nullptr);
}

TEST_F(SafetensorsTest, TensorsAreInDataOffsetOrder) {
  SafetensorsWriter writer;
  for (const TestTensor& t : sample_tensors()) {
    writer.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  }
  writer.write(path("w.safetensors"));
  // Offsets that disagree with name order: "z" first in the data, "a" second.
  write_bytes(path("r.safetensors"),
              raw_safetensors(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
                              R"("z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                              6));

  for (const std::string name : {"w.safetensors", "r.safetensors"}) {
    SafetensorsReader reader(path(name));
    const std::vector<TensorInfo>& infos = reader.tensors();
    for (size_t i = 1; i < infos.size(); ++i) {
      EXPECT_LE(infos[i - 1].begin_bytes, infos[i].begin_bytes) << name << " " << infos[i].name;
    }
  }
  SafetensorsReader reader(path("r.safetensors"));
  ASSERT_EQ(reader.tensors().size(), 2u);
  EXPECT_EQ(reader.tensors()[0].name, "z");
  EXPECT_EQ(reader.tensors()[1].name, "a");
  EXPECT_EQ(reader.data(reader.tensors()[1])[0], 4);  // data byte i holds i % 251
}

TEST_F(SafetensorsTest, MetadataRoundTrip) {
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  writer.set_metadata("step", "0");
  writer.set_metadata("step", "42");  // the last value wins
  writer.set_metadata("note", "unicode \xc3\xa9 and \"quotes\"");
  const std::vector<float> w = {1, 2};
  writer.add("w", DType::kF32, {2}, w.data(), sizeof(float) * w.size());
  writer.write(path("m.safetensors"));

  SafetensorsReader reader(path("m.safetensors"));
  const std::map<std::string, std::string> expected = {
      {"format", "pt"}, {"note", "unicode \xc3\xa9 and \"quotes\""}, {"step", "42"}};
  EXPECT_EQ(reader.metadata(), expected);
  EXPECT_EQ(reader.find("__metadata__"), nullptr);
  ASSERT_EQ(reader.tensors().size(), 1u);
}

TEST_F(SafetensorsTest, EmptyFileOfNoTensorsRoundTrips) {
  SafetensorsWriter().write(path("none.safetensors"));
  SafetensorsReader reader(path("none.safetensors"));
  EXPECT_TRUE(reader.tensors().empty());
}

TEST_F(SafetensorsTest, SerializeIsDeterministicAndPadsHeaderTo8Bytes) {
  const std::vector<TestTensor> tensors = sample_tensors();
  SafetensorsWriter forward, backward;
  for (const TestTensor& t : tensors) {
    forward.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  }
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    backward.add(it->name, it->dtype, it->shape, it->bytes.data(), it->bytes.size());
  }
  const std::vector<uint8_t> bytes = forward.serialize();
  EXPECT_EQ(bytes, backward.serialize());

  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  EXPECT_EQ(header_bytes % 8, 0u);
  ASSERT_LE(8 + header_bytes, bytes.size());
  EXPECT_EQ(bytes[8], '{');
  // Name order in the data section: the first tensor by name comes first.
  write_bytes(path("d"), bytes);
  SafetensorsReader reader(path("d"));
  std::vector<std::string> names;
  for (const TensorInfo& info : reader.tensors()) {
    if (info.size_bytes > 0) names.push_back(info.name);
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST_F(SafetensorsTest, ReadsHeaderWithTrailingSpaces) {
  write_bytes(path("s"),
              raw_safetensors(R"({"t":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}     )", 3));
  SafetensorsReader reader(path("s"));
  ASSERT_NE(reader.find("t"), nullptr);
  EXPECT_EQ(reader.find("t")->size_bytes, 3u);
}

TEST_F(SafetensorsTest, WriterRejectsDuplicateName) {
  SafetensorsWriter writer;
  const uint8_t b = 1;
  writer.add("dup", DType::kU8, {1}, &b, 1);
  const std::string msg =
      message_of<ConfigError>([&] { writer.add("dup", DType::kU8, {1}, &b, 1); });
  EXPECT_NE(msg.find("'dup'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unique"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, WriterRejectsWrongByteSize) {
  SafetensorsWriter writer;
  const std::vector<float> w(5);
  const std::string msg = message_of<ConfigError>([&] {
    writer.add("w", DType::kF32, {2, 3}, w.data(), sizeof(float) * w.size());
  });
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 20 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 24 bytes"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, WriterRejectsNegativeDimensionAndReservedName) {
  SafetensorsWriter writer;
  std::string msg =
      message_of<ConfigError>([&] { writer.add("neg", DType::kU8, {-1}, nullptr, 0); });
  EXPECT_NE(msg.find("'neg'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(">= 0"), std::string::npos) << msg;
  msg = message_of<ConfigError>([&] { writer.add("__metadata__", DType::kU8, {0}, nullptr, 0); });
  EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, WriteToMissingDirectoryThrowsIoError) {
  SafetensorsWriter writer;
  const std::string target = path("missing/model.safetensors");
  const std::string msg = message_of<IoError>([&] { writer.write(target); });
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, FailedWriteLeavesOldFileReadable) {
  SafetensorsWriter old_writer;
  const uint8_t b = 9;
  old_writer.add("old", DType::kU8, {1}, &b, 1);
  old_writer.write(path("m.safetensors"));
  fs::remove_all(dir());  // the next write cannot create its temporary
  const std::string msg = message_of<IoError>([&] { old_writer.write(path("m.safetensors")); });
  EXPECT_NE(msg.find(path("m.safetensors")), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsStreamWriter and AtomicFileWriter: files written piece by piece.

std::vector<SafetensorsStreamWriter::Entry> stream_entries(const std::vector<TestTensor>& tensors) {
  std::vector<SafetensorsStreamWriter::Entry> entries;
  for (const TestTensor& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  return entries;
}

TEST_F(SafetensorsTest, StreamWriterInAnyOrderGivesTheWritersBytes) {
  const std::vector<TestTensor> tensors = sample_tensors();
  SafetensorsWriter whole;
  for (const TestTensor& t : tensors)
    whole.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  whole.set_metadata("format", "pt");

  SafetensorsStreamWriter stream(path("s.safetensors"), stream_entries(tensors),
                                 {{"format", "pt"}});
  // Not there until commit: the pieces go to a temporary.
  EXPECT_FALSE(fs::exists(path("s.safetensors")));
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it)
    stream.write(it->name, it->bytes.data(), it->bytes.size());
  stream.commit();
  EXPECT_EQ(read_bytes(path("s.safetensors")), whole.serialize());
  EXPECT_EQ(stream.file_bytes(), whole.serialize().size());
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"s.safetensors"});
}

TEST_F(SafetensorsTest, StreamWriterRefusesWrongWritesAndLeavesNothingWithoutCommit) {
  const std::vector<TestTensor> tensors = sample_tensors();
  {
    SafetensorsStreamWriter stream(path("s.safetensors"), stream_entries(tensors));
    const TestTensor& t = tensors[0];
    std::string msg = message_of<ConfigError>([&] { stream.write("nope", t.bytes.data(), 1); });
    EXPECT_NE(msg.find("'nope' is not in the header"), std::string::npos) << msg;
    msg = message_of<ConfigError>([&] { stream.write(t.name, t.bytes.data(), 3); });
    EXPECT_NE(msg.find("got 3 bytes"), std::string::npos) << msg;
    stream.write(t.name, t.bytes.data(), t.bytes.size());
    msg = message_of<ConfigError>([&] { stream.write(t.name, t.bytes.data(), t.bytes.size()); });
    EXPECT_NE(msg.find("written twice"), std::string::npos) << msg;
    msg = message_of<ConfigError>([&] { stream.commit(); });
    EXPECT_NE(msg.find("was never written"), std::string::npos) << msg;
  }
  EXPECT_TRUE(dir_entries().empty());
  const std::string msg = message_of<ConfigError>([&] {
    SafetensorsStreamWriter s(path("d.safetensors"),
                              {{"a", DType::kU8, {1}}, {"a", DType::kU8, {2}}});
  });
  EXPECT_NE(msg.find("added twice"), std::string::npos) << msg;
  EXPECT_TRUE(dir_entries().empty());
}

// ---------------------------------------------------------------------------------------------
// safetensors: malformed files. Every message names the file, and the tensor where one is at
// fault.

TEST_F(SafetensorsTest, MissingFileThrowsIoError) {
  const std::string msg = message_of<IoError>([&] { SafetensorsReader r(path("absent")); });
  EXPECT_NE(msg.find(path("absent")), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, RejectsFileShorterThan8Bytes) {
  for (size_t n : {0, 5, 7}) {
    write_bytes(path("short"), std::vector<uint8_t>(n, 0));
    const std::string msg = message_of<FormatError>([&] { SafetensorsReader r(path("short")); });
    EXPECT_NE(msg.find(path("short")), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(n) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("8-byte header length"), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, RejectsHeaderLengthPastEndOfFile) {
  std::vector<uint8_t> bytes = raw_safetensors("{}", 0);
  bytes[0] = 100;
  write_bytes(path("f"), bytes);
  const std::string msg = message_of<FormatError>([&] { SafetensorsReader r(path("f")); });
  EXPECT_NE(msg.find(path("f")), std::string::npos) << msg;
  EXPECT_NE(msg.find("header length 100 runs past the end of the 10-byte file"), std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, RejectsHeaderLengthOver100MB) {
  std::vector<uint8_t> bytes = raw_safetensors("{}", 0);
  const uint64_t n = 200'000'000;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * i));
  write_bytes(path("f"), bytes);
  const std::string msg = message_of<FormatError>([&] { SafetensorsReader r(path("f")); });
  EXPECT_NE(msg.find(path("f")), std::string::npos) << msg;
  EXPECT_NE(msg.find("exceeds the limit of 100000000 bytes"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, RejectsTruncatedFile) {
  SafetensorsWriter writer;
  const std::vector<float> a(4, 1.0f), b(8, 2.0f);
  writer.add("a", DType::kF32, {4}, a.data(), 16);
  writer.add("b", DType::kF32, {2, 4}, b.data(), 32);
  std::vector<uint8_t> bytes = writer.serialize();

  // Cut into the data section: the last tensor runs past the end.
  write_bytes(path("cut_data"), std::vector<uint8_t>(bytes.begin(), bytes.end() - 3));
  std::string msg = message_of<FormatError>([&] { SafetensorsReader r(path("cut_data")); });
  EXPECT_NE(msg.find(path("cut_data")), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  // Cut into the header.
  write_bytes(path("cut_header"), std::vector<uint8_t>(bytes.begin(), bytes.begin() + 20));
  msg = message_of<FormatError>([&] { SafetensorsReader r(path("cut_header")); });
  EXPECT_NE(msg.find(path("cut_header")), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

// JSON nested a million levels deep: nlohmann parses it without recursion, but the messages about
// a wrong 'dtype' (or metadata value) wrote it out recursively and overflowed the stack. Found by
// the safetensors fuzz target's edge cases (tests/fuzz/safetensors_fuzz.cpp, docs/fuzzing.md).
TEST_F(SafetensorsTest, RejectsDeeplyNestedHeader) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  for (const std::string& header :
       {R"({"w":{"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]}})",
        R"({"__metadata__":{"k":)" + deep + "}}"}) {
    write_bytes(path("deep"), raw_safetensors(header, 4));
    const std::string msg = message_of<FormatError>([&] { SafetensorsReader r(path("deep")); });
    EXPECT_NE(msg.find(path("deep")), std::string::npos) << msg;
    EXPECT_NE(msg.find("the header nests JSON deeper than 64 levels"), std::string::npos) << msg;
  }
}

// A malformed header: its text, the data section's size, the tensor at fault ("" if none) and
// one more substring the message must contain.
struct BadHeaderCase {
  std::string label;
  std::string header;
  uint64_t data_bytes;
  std::string tensor;
  std::string expected;
};

void PrintTo(const BadHeaderCase& c, std::ostream* os) { *os << c.label << ": " << c.header; }

class SafetensorsBadHeaderTest : public FormatsFileTest,
                                 public ::testing::WithParamInterface<BadHeaderCase> {};

TEST_P(SafetensorsBadHeaderTest, IsRejectedNamingFileAndTensor) {
  const BadHeaderCase& c = GetParam();
  const std::string file = path("bad.safetensors");
  write_bytes(file, raw_safetensors(c.header, c.data_bytes));
  const std::string msg = message_of<FormatError>([&] { SafetensorsReader r(file); });
  EXPECT_NE(msg.find("'" + file + "'"), std::string::npos) << msg;
  if (!c.tensor.empty()) {
    EXPECT_NE(msg.find("tensor '" + c.tensor + "'"), std::string::npos) << msg;
  }
  EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
}

// A well-formed entry with the given dtype, shape and offsets.
std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsBadHeaderTest,
    ::testing::Values(
        BadHeaderCase{"NotJson", "{not json", 0, "", "not valid JSON"},
        BadHeaderCase{"EmptyHeader", "", 0, "", "not valid JSON"},
        BadHeaderCase{"NotAnObject", "[1, 2]", 0, "", "must be a JSON object of tensors"},
        BadHeaderCase{"EntryNotAnObject", R"({"w": 5})", 0, "w", "must be a JSON object"},
        BadHeaderCase{"MissingDtype", R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, "w",
                      "has no 'dtype'"},
        BadHeaderCase{"MissingShape", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, "w",
                      "has no 'shape'"},
        BadHeaderCase{"MissingDataOffsets", R"({"w":{"dtype":"F32","shape":[1]}})", 4, "w",
                      "has no 'data_offsets'"},
        BadHeaderCase{"DtypeNotString", R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4,
                      "w", "'dtype' must be a string"},
        BadHeaderCase{"UnknownDtype", R"({"w":)" + entry("Q4", "[1]", "[0,4]") + "}", 4, "w",
                      "unknown dtype 'Q4'; supported dtypes are F64, F32"},
        BadHeaderCase{"ShapeNotArray", R"({"w":)" + entry("F32", R"("2x2")", "[0,16]") + "}", 16,
                      "w", "'shape' must be an array"},
        BadHeaderCase{"ShapeOfFloats", R"({"w":)" + entry("F32", "[1.5]", "[0,4]") + "}", 4, "w",
                      "'shape' must hold non-negative integers"},
        BadHeaderCase{"NegativeDimension", R"({"w":)" + entry("F32", "[-1,4]", "[0,0]") + "}", 0,
                      "w", "negative dimension"},
        BadHeaderCase{"NumelOverflow",
                      R"({"w":)" + entry("F32", "[4611686018427387904,4]", "[0,0]") + "}", 0, "w",
                      "overflows 64 bits"},
        BadHeaderCase{"ByteSizeOverflow",
                      R"({"w":)" + entry("F64", "[2305843009213693952]", "[0,0]") + "}", 0, "w",
                      "overflows 64 bits"},
        BadHeaderCase{"OffsetsNotArray", R"({"w":)" + entry("F32", "[1]", R"("0-4")") + "}", 4, "w",
                      "'data_offsets' must be [begin, end]"},
        BadHeaderCase{"OffsetsWrongCount", R"({"w":)" + entry("F32", "[1]", "[0]") + "}", 4, "w",
                      "'data_offsets' must be [begin, end]"},
        BadHeaderCase{"OffsetsNegative", R"({"w":)" + entry("F32", "[1]", "[-4,0]") + "}", 4, "w",
                      "'data_offsets' must be [begin, end]"},
        BadHeaderCase{"BeginAfterEnd", R"({"w":)" + entry("F32", "[1]", "[8,4]") + "}", 8, "w",
                      "has begin > end"},
        BadHeaderCase{"EndBeyondData", R"({"w":)" + entry("F32", "[2]", "[0,8]") + "}", 4, "w",
                      "run past the end of the 4-byte data section"},
        BadHeaderCase{"SizeMismatch", R"({"w":)" + entry("F32", "[2]", "[0,4]") + "}", 4, "w",
                      "hold 4 bytes, but shape [2] of F32 needs 8 bytes"},
        BadHeaderCase{"Overlap",
                      R"({"a":)" + entry("F32", "[2]", "[0,8]") + R"(,"b":)" +
                          entry("F32", "[2]", "[4,12]") + "}",
                      12, "b", "overlap tensor 'a'"},
        BadHeaderCase{"ZeroSizeInsideAnother",
                      R"({"a":)" + entry("F32", "[2]", "[0,8]") + R"(,"b":)" +
                          entry("F32", "[0]", "[4,4]") + "}",
                      8, "b", "overlap tensor 'a'"},
        BadHeaderCase{"HoleBetweenTensors",
                      R"({"a":)" + entry("F32", "[1]", "[0,4]") + R"(,"b":)" +
                          entry("F32", "[1]", "[8,12]") + "}",
                      12, "b", "bytes [4, 8) of the data section before tensor 'b' belong to no"},
        BadHeaderCase{"HoleAtStart", R"({"a":)" + entry("F32", "[1]", "[4,8]") + "}", 8, "a",
                      "bytes [0, 4)"},
        BadHeaderCase{"UnusedDataAtEnd", R"({"a":)" + entry("F32", "[1]", "[0,4]") + "}", 8, "",
                      "bytes [4, 8) at the end of the data section belong to no tensor (the last "
                      "is 'a')"},
        BadHeaderCase{"DataWithoutTensors", "{}", 4, "", "belong to no tensor"},
        BadHeaderCase{"MetadataNotObject", R"({"__metadata__":"x"})", 0, "",
                      "'__metadata__' must be an object of string to string"},
        BadHeaderCase{"MetadataValueNotString", R"({"__metadata__":{"k":1}})", 0, "",
                      "'__metadata__' key 'k' must have a string value"},
        BadHeaderCase{"DuplicateName",
                      R"({"a":)" + entry("U8", "[1]", "[0,1]") + R"(,"a":)" +
                          entry("U8", "[1]", "[0,1]") + "}",
                      1, "", "names 'a' more than once"}),
    [](const ::testing::TestParamInfo<BadHeaderCase>& info) { return info.param.label; });

}  // namespace
}  // namespace pstar::formats
