// The profile reader against every kind of malformed file (missing, garbage, truncated, another
// HDF5 file, a newer schema, missing or mistyped datasets and attributes, inconsistent shapes,
// unknown codes), each tampered with through HDF5's own APIs.
#include "profile_fixture.h"

namespace pstar::formats {
namespace {

using namespace pstar::formats::profile_testing;  // NOLINT(build/namespaces): the fixture

TEST_F(ProfileTest, MissingFileIsAnIoError) {
  const std::string msg = message_of<IoError>([&] { read_profile(path("nope.h5")); });
  EXPECT_NE(msg.find(path("nope.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;

  const std::string dir_msg = message_of<IoError>([&] { read_profile(scratch_.path().string()); });
  EXPECT_NE(dir_msg.find("not a regular file"), std::string::npos) << dir_msg;
}

TEST_F(ProfileTest, GarbageFileIsAFormatError) {
  pstar::testing::write_text(path("garbage.h5"), "this is not HDF5 at all, just some text\n");
  std::string msg = message_of<FormatError>([&] { read_profile(path("garbage.h5")); });
  EXPECT_NE(msg.find(path("garbage.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a pstar profile"), std::string::npos) << msg;

  pstar::testing::write_text(path("empty.h5"), "");
  msg = message_of<FormatError>([&] { read_profile(path("empty.h5")); });
  EXPECT_NE(msg.find(path("empty.h5")), std::string::npos) << msg;
}

TEST_F(ProfileTest, TruncatedFileIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  fs::resize_file(path("p.h5"), fs::file_size(path("p.h5")) / 2);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find(path("p.h5")), std::string::npos) << msg;
}

TEST_F(ProfileTest, OtherHdf5FileIsNotAProfile) {
  { H5::H5File file(path("other.h5"), H5F_ACC_TRUNC); }
  std::string msg = message_of<FormatError>([&] { read_profile(path("other.h5")); });
  EXPECT_NE(msg.find(path("other.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a pstar profile"), std::string::npos) << msg;

  write_profile(path("p.h5"), full_profile());
  {
    H5::H5File file(path("p.h5"), H5F_ACC_RDWR);
    file.openAttribute("format").write(H5::StrType(H5::PredType::C_S1, H5T_VARIABLE),
                                       std::string("something-else"));
  }
  reseal_profile(path("p.h5"));
  msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("'something-else'"), std::string::npos) << msg;
}

TEST_F(ProfileTest, NewerSchemaIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  set_schema_version(path("p.h5"), 2);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find(path("p.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("newer pstar (schema 2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reads schema 1"), std::string::npos) << msg;
}

TEST_F(ProfileTest, MissingDatasetIsAFormatErrorNamingIt) {
  for (const char* name : {"/memory/by_moment/device_total", "/chunks/payloads", "/location",
                           "/steps/loss", "/events"}) {
    SCOPED_TRACE(name);
    const std::string file = path("p.h5");
    write_profile(file, full_profile());
    RawFile(file).delete_link(name);
    reseal_profile(file);
    const std::string msg = message_of<FormatError>([&] { read_profile(file); });
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(name) + " is missing"), std::string::npos) << msg;
  }
}

TEST_F(ProfileTest, MissingAttributeIsAFormatErrorNamingIt) {
  write_profile(path("p.h5"), full_profile());
  H5::H5File(path("p.h5"), H5F_ACC_RDWR).removeAttr("precision");
  reseal_profile(path("p.h5"));
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("attribute 'precision' of / is missing"), std::string::npos) << msg;
}

TEST_F(ProfileTest, WrongTypeIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int64_t>(path("p.h5"), "/steps/loss", H5::PredType::NATIVE_INT64, {2}, 5);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/steps/loss holds a 8-byte signed integer, expected float64"),
            std::string::npos)
      << msg;
}

TEST_F(ProfileTest, WrongRankIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int64_t>(path("p.h5"), "/chunks/id", H5::PredType::NATIVE_INT64, {3, 1}, 0);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/chunks/id has 2 dimension(s), expected 1"), std::string::npos) << msg;
}

TEST_F(ProfileTest, ColumnLengthsMustAgree) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int64_t>(path("p.h5"), "/events/bytes", H5::PredType::NATIVE_INT64, {7}, 1);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/events/bytes has 7 rows but /events/time_s has 8"), std::string::npos)
      << msg;
}

// /chunks/tensors is optional (a file from before it has none) but, where present, a column like
// the others: one string per chunk.
TEST_F(ProfileTest, ChunkTensorNamesAreOptionalButChecked) {
  const std::string file = path("p.h5");
  write_profile(file, full_profile());
  RawFile(file).delete_link("/chunks/tensors");
  reseal_profile(file);
  const Profile absent = read_profile(file);
  EXPECT_TRUE(absent.chunks.tensors.empty());
  EXPECT_EQ(absent.chunks.payloads, full_profile().chunks.payloads);

  write_profile(file, full_profile());
  replace_dataset<int64_t>(file, "/chunks/tensors", H5::PredType::NATIVE_INT64, {3}, 0);
  std::string msg = message_of<FormatError>([&] { read_profile(file); });
  EXPECT_NE(msg.find("/chunks/tensors holds a 8-byte signed integer, expected a variable-length "
                     "string"),
            std::string::npos)
      << msg;

  write_profile(file, full_profile());
  {
    RawFile(file).delete_link("/chunks/tensors");
    H5::H5File h5(file, H5F_ACC_RDWR);
    const hsize_t dims[1] = {2};
    const H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    const char* names[2] = {"a.weight", "b.weight"};
    h5.openGroup("/chunks")
        .createDataSet("tensors", type, H5::DataSpace(1, dims))
        .write(names, type);
  }
  reseal_profile(file);
  msg = message_of<FormatError>([&] { read_profile(file); });
  EXPECT_NE(msg.find("/chunks/tensors has 2 rows but /chunks/id has 3"), std::string::npos) << msg;
}

TEST_F(ProfileTest, LocationShapeMustMatchTheTables) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int8_t>(path("p.h5"), "/location", H5::PredType::NATIVE_INT8, {4, 4}, 1);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/location has shape [4, 4], expected [4, 3]"), std::string::npos) << msg;
}

// Replaces the string attribute `name` of `object` (a variable-length string, as the writer makes).
void set_string_attribute(const std::string& path, const std::string& object, const char* name,
                          const std::string& value) {
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    H5::H5Object* target = nullptr;
    H5::Group group;
    H5::DataSet dataset;
    if (object == "/events") {
      group = file.openGroup(object);
      target = &group;
    } else {
      dataset = file.openDataSet(object);
      target = &dataset;
    }
    target->removeAttr(name);
    const H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    target->createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, value);
  }
  reseal_profile(path);
}

// Codes are only ever added at the end: a file written before the NVMe tier, whose attributes name
// fewer places and event kinds, still reads; names that differ do not.
TEST_F(ProfileTest, AFileFromBeforeTheNvmeCodesReadsAndDifferentNamesDoNot) {
  write_profile(path("p.h5"), full_profile());
  set_string_attribute(path("p.h5"), "/location", "places", "absent,host,device");
  set_string_attribute(path("p.h5"), "/events", "kinds",
                       "move_h2d,move_d2h,allocate,release,adam_device,adam_host,gather,reduce");
  expect_same(read_profile(path("p.h5")), full_profile());
  set_string_attribute(path("p.h5"), "/location", "places", "absent,device,host");
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("codes differ"), std::string::npos) << msg;
}

TEST_F(ProfileTest, UnknownCodeIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  replace_dataset<int8_t>(path("p.h5"), "/events/kind", H5::PredType::NATIVE_INT8, {8}, 10);
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("/events/kind[0] is 10"), std::string::npos) << msg;
}

// A corrupt dataspace can claim any number of elements, and the reader allocates that many before
// reading: found by tests/fuzz/profile_fuzz (a 32 GiB vector). A dataset the file's bytes cannot
// hold must be a FormatError before anything is allocated.
TEST_F(ProfileTest, DatasetLargerThanTheFileIsAFormatError) {
  write_profile(path("p.h5"), full_profile());
  RawFile(path("p.h5")).delete_link("/events/time_s");
  {
    // 2^40 float64 (8 TiB), chunked and never written: the file stores none of them.
    H5::H5File file(path("p.h5"), H5F_ACC_RDWR);
    const hsize_t dims[1] = {hsize_t{1} << 40};
    const hsize_t chunk[1] = {1024};
    H5::DSetCreatPropList plist;
    plist.setChunk(1, chunk);
    file.createDataSet("/events/time_s", H5::PredType::IEEE_F64LE, H5::DataSpace(1, dims), plist);
  }
  reseal_profile(path("p.h5"));
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(msg.find("dataset /events/time_s claims 1099511627776 elements"), std::string::npos)
      << msg;

  // The same for the location matrix, whose two dimensions multiply past 64 bits.
  write_profile(path("q.h5"), full_profile());
  RawFile(path("q.h5")).delete_link("/location");
  {
    H5::H5File file(path("q.h5"), H5F_ACC_RDWR);
    const hsize_t dims[2] = {hsize_t{1} << 40, hsize_t{1} << 40};
    const hsize_t chunk[2] = {64, 64};
    H5::DSetCreatPropList plist;
    plist.setChunk(2, chunk);
    file.createDataSet("/location", H5::PredType::STD_I8LE, H5::DataSpace(2, dims), plist);
  }
  reseal_profile(path("q.h5"));
  const std::string msg2 = message_of<FormatError>([&] { read_profile(path("q.h5")); });
  EXPECT_NE(msg2.find("dataset /location has shape [1099511627776, 1099511627776]"),
            std::string::npos)
      << msg2;
}

// ---------------------------------------------------------------------------------------------
// The file as h5py sees it

// A python with h5py: `python3`, else Debian's (python3-h5py installs there when `python3` on

}  // namespace
}  // namespace pstar::formats
