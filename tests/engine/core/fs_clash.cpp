// A stand-in for LibTorch 2.x's exported copies of libstdc++'s std::filesystem functions
// (Note [libstdc++ before LibTorch]): a shared library that defines remove_all itself. If the
// engine_core_tests executable bound std::filesystem to this library, LinkTest would see it.
#include <cstdint>
#include <filesystem>
#include <system_error>

namespace std::filesystem {

std::uintmax_t remove_all(const path&, std::error_code& ec) {
  ec = std::make_error_code(std::errc::operation_not_supported);
  return 0;
}

}  // namespace std::filesystem

// Referenced by the test so that the library stays in the executable's NEEDED list.
extern "C" int pstar_fs_clash_loaded() { return 1; }
