// The profile file from outside: h5py reads what pstar writes, and the checksum header leads the
// file, so that changed bytes are refused before HDF5 reads them (older profiles read unchecked).
#include "profile_fixture.h"

namespace pstar::formats {
namespace {

using namespace pstar::formats::profile_testing;  // NOLINT(build/namespaces): the fixture

std::string python_with_h5py() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) + " -c 'import h5py' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

std::string run_command(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0) << command << "\n" << out;
  return out;
}

TEST_F(ProfileTest, H5pyReadsTheFile) {
  const std::string python = python_with_h5py();
  if (python.empty()) GTEST_SKIP() << "h5py is not installed (apt-get install python3-h5py)";
  write_profile(path("p.h5"), full_profile());
  pstar::testing::write_text(path("read.py"), R"(import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(len(f["chunks/id"]), f["chunks/id"].dtype, f["chunks/embedding"].dtype)
    print(type(f.attrs["precision"]).__name__, f.attrs["precision"], f.attrs["format"])
    print(int(f.attrs["schema_version"]), int(f.attrs["device_budget"]))
    print(f["memory/by_moment"].attrs["stages"])
    print(f["events"].attrs["kinds"])
    print(f["location"].shape, f["location"].dtype, f["location"].attrs["places"])
    print(f["location"][0].tolist(), f["chunks/payloads"].asstr()[2])
    print([t.split(",") for t in f["chunks/tensors"].asstr()[:]])
    print(f["memory/by_moment/device_total"][:].tolist())
    print(f["events/moment"][:].tolist())
    print(sorted(f["memory/by_time"].keys()))
    print(len(f.attrs["config_json"]))
    print(f.userblock_size)
)");
  const std::string out =
      run_command(python + " '" + path("read.py") + "' '" + path("p.h5") + "' 2>&1");
  const Profile p = full_profile();
  const std::string expected = str_cat(
      "3 int64 int8\n", "str bf16 pstar-profile\n", "1 85899345920\n",
      "forward,backward,optimizer\n",
      "move_h2d,move_d2h,allocate,release,adam_device,adam_host,gather,reduce,nvme_read,"
      "nvme_write\n",
      "(4, 3) int8 absent,host,device,nvme\n", "[2, 1, 0] param+grad (gathered) ✓\n",
      "[['transformer.wte.weight'], ['h.0.attn.c_attn.weight', 'h.0.attn.c_attn.bias'], ['']]\n",
      "[100, 200, 1125899906842624, 0]\n", "[-1, 0, 1, -1, 2, 2, -1, 3]\n",
      "['device_chunks', 'device_non_model', 'device_total', 'host_chunks', 'host_non_model', "
      "'host_total', 'stage', 'time_s']\n",
      // Python counts characters, not UTF-8 bytes: µ is two bytes and ✓ three.
      p.run.config_json.size() - 3, "\n",
      // pstar's checksum header, which h5py skips (Note [profile checksum]).
      "512\n");
  EXPECT_EQ(out, expected);
  // Reading it left it as it was.
  EXPECT_TRUE(read_profile(path("p.h5")).checksummed);
}

// ---------------------------------------------------------------------------------------------
// The checksum header (Note [profile checksum])

TEST_F(ProfileTest, ChecksumHeaderLeadsTheFile) {
  write_profile(path("p.h5"), full_profile());
  const std::string bytes = pstar::testing::read_text(path("p.h5"));
  ASSERT_GT(bytes.size(), 1024u);
  char expected[128];
  std::snprintf(expected, sizeof expected, "pstar-profile\ncrc32 %08x\nbytes %020zu\nversion %s\n",
                0u, bytes.size(), pstar::version());
  // The header as documented, its CRC-32 that of the file with the 8 digits read as '0's.
  std::string zeroed = bytes;
  zeroed.replace(20, 8, "00000000");
  EXPECT_EQ(zeroed.substr(0, std::strlen(expected)), expected);
  EXPECT_EQ(zeroed.find_first_not_of('\0', std::strlen(expected)), 512u);
  const uLong crc =
      ::crc32(0, reinterpret_cast<const Bytef*>(zeroed.data()), static_cast<uInt>(zeroed.size()));
  char digits[16];
  std::snprintf(digits, sizeof digits, "%08lx", crc);
  EXPECT_EQ(bytes.substr(20, 8), digits);
  // The HDF5 superblock right after it.
  EXPECT_EQ(bytes.substr(512, 8), "\x89HDF\r\n\x1a\n");
  EXPECT_TRUE(read_profile(path("p.h5")).checksummed);
}

// Any change after pstar wrote the file, even one HDF5 itself makes, is refused with the file's
// name before libhdf5 reads it; reseal_profile accepts a deliberate edit.
TEST_F(ProfileTest, ChangedBytesAreRefusedBeforeHdf5ReadsThem) {
  write_profile(path("p.h5"), full_profile());
  const std::string good = pstar::testing::read_text(path("p.h5"));
  struct Case {
    size_t offset;
    const char* message;
  };
  for (const Case& c :
       {Case{0, "has a damaged header"}, Case{3, "has a damaged header"},
        Case{14, "has a damaged checksum header"}, Case{21, "has a damaged checksum header"},
        Case{40, "has a damaged checksum header"}, Case{200, "is corrupt: its CRC-32 is"},
        Case{600, "is corrupt: its CRC-32 is"}, Case{good.size() / 2, "is corrupt: its CRC-32 is"},
        Case{good.size() - 1, "is corrupt: its CRC-32 is"}}) {
    SCOPED_TRACE(c.offset);
    std::string bytes = good;
    bytes[c.offset] = static_cast<char>(bytes[c.offset] ^ 0xff);
    pstar::testing::write_text(path("bad.h5"), bytes);
    const std::string msg = message_of<FormatError>([&] { read_profile(path("bad.h5")); });
    EXPECT_NE(msg.find("profile '" + path("bad.h5") + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
  // A recorded digit changed to another digit: the CRC-32 or the size no longer match.
  std::string bytes = good;
  bytes[21] = bytes[21] == '0' ? '1' : '0';
  pstar::testing::write_text(path("bad.h5"), bytes);
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("is corrupt: its CRC-32 is 0x"),
            std::string::npos);
  bytes = good;
  bytes[53] = bytes[53] == '0' ? '1' : '0';
  pstar::testing::write_text(path("bad.h5"), bytes);
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("bytes but its header records"),
            std::string::npos);
  // Appended to, and truncated.
  pstar::testing::write_text(path("bad.h5"), good + "x");
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("bytes but its header records " + std::to_string(good.size())),
            std::string::npos);
  pstar::testing::write_text(path("bad.h5"), good.substr(0, 300));
  EXPECT_NE(message_of<FormatError>([&] {
              read_profile(path("bad.h5"));
            }).find("has a damaged checksum header"),
            std::string::npos);

  // An edit through HDF5 (as h5py's "r+" would make) changes the bytes under the header.
  H5::H5File(path("p.h5"), H5F_ACC_RDWR).removeAttr("precision");
  const std::string msg = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_TRUE(msg.find("is corrupt: its CRC-32 is") != std::string::npos ||
              msg.find("bytes but its header records") != std::string::npos)
      << msg;
  EXPECT_NE(msg.find("reseal"), std::string::npos) << msg;
  reseal_profile(path("p.h5"));
  const std::string after = message_of<FormatError>([&] { read_profile(path("p.h5")); });
  EXPECT_NE(after.find("attribute 'precision' of / is missing"), std::string::npos) << after;

  // Only a pstar profile can be resealed.
  { H5::H5File file(path("other.h5"), H5F_ACC_TRUNC); }
  EXPECT_NE(message_of<FormatError>([&] {
              reseal_profile(path("other.h5"));
            }).find("has no pstar checksum header"),
            std::string::npos);
}

// A profile from before checksums (an older pstar's, no user block; the fuzz corpus keeps one)
// still reads, unchecked.
TEST_F(ProfileTest, ProfilesFromBeforeChecksumsAreReadUnchecked) {
  const std::string old = std::string(PSTAR_SOURCE_DIR) + "/tests/fuzz/corpus/profile/tiny.h5";
  ASSERT_EQ(pstar::testing::read_text(old).substr(0, 8), "\x89HDF\r\n\x1a\n");
  const Profile p = read_profile(old);
  EXPECT_FALSE(p.checksummed);
  EXPECT_EQ(p.run.schema_version, 1);
  EXPECT_GT(p.chunks.size(), 0u);
  EXPECT_TRUE(p.chunks.tensors.empty()) << "written before /chunks/tensors existed";
  // Written again, it gets the header, and still no /chunks/tensors.
  write_profile(path("new.h5"), p);
  const Profile again = read_profile(path("new.h5"));
  EXPECT_TRUE(again.checksummed);
  EXPECT_TRUE(again.chunks.tensors.empty());
}

}  // namespace
}  // namespace pstar::formats
