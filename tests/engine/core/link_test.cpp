// Note [libstdc++ before LibTorch] (cmake/libstdcxx_first.cmake): a process that loads LibTorch
// must still bind std::filesystem to libstdc++. The build-time check looks at NEEDED order; this
// one asks the dynamic linker itself, in a process that has LibTorch loaded.
#include <dlfcn.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

extern "C" int pstar_fs_clash_loaded();  // fs_clash.cpp

namespace pstar {
namespace {

// Where the process's global lookup binds `symbol`: the file that defines it, or "" if nothing
// does. Unversioned, as LibTorch's copies are: an unversioned definition earlier in the lookup
// order also satisfies the executable's versioned references (dlvsym would skip it).
std::string defining_object(const char* symbol) {
  void* address = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

TEST(Link, StdFilesystemBindsToLibstdcxxWithLibTorchLoaded) {
  // A LibTorch call and one into fs_clash.cpp's library, so that the test loads both (and their
  // std::filesystem exports) whatever the linker's defaults.
  EXPECT_EQ(torch::ones({2}).sum().item<float>(), 2.0f);
  EXPECT_EQ(pstar_fs_clash_loaded(), 1);
  int found = 0;
  for (const char* symbol : {
           // new (cxx11) ABI, then the old one: builds use one of them
           "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",
           "_ZNSt10filesystem18create_directoriesERKNS_7__cxx114pathERSt10error_code",
           "_ZNSt10filesystem6statusERKNS_7__cxx114pathERSt10error_code",
           "_ZNSt10filesystem10remove_allERKNS_4pathERSt10error_code",
           "_ZNSt10filesystem18create_directoriesERKNS_4pathERSt10error_code",
       }) {
    const std::string object = defining_object(symbol);
    if (object.empty()) continue;
    ++found;
    EXPECT_NE(object.find("libstdc++"), std::string::npos)
        << symbol << " binds to " << object << ", not libstdc++ (cmake/libstdcxx_first.cmake)";
  }
  EXPECT_GT(found, 0) << "no std::filesystem symbol found in the process";
}

TEST(Link, StdFilesystemWorksWithLibTorchLoaded) {
  EXPECT_EQ(pstar_fs_clash_loaded(), 1);
  pstar::testing::ScratchDir dir;
  const auto nested = dir.path() / "a" / "b";
  std::filesystem::create_directories(nested);
  pstar::testing::write_text((nested / "f.txt").string(), "x");
  EXPECT_EQ(std::filesystem::file_size(nested / "f.txt"), 1u);
  std::error_code ec;
  EXPECT_EQ(std::filesystem::remove_all(dir.path() / "a", ec), 3u);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "a"));
}

}  // namespace
}  // namespace pstar
