// The profile file's HDF5 layout (profile/layout.h): the helpers its writer and reader share, and
// the answer that this build has HDF5.
#include "profile/layout.h"

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace pstar::formats {

// This build has HDF5; profile_absent.cpp stands in for this file in one without.
bool profile_io_built() { return true; }

void require_profile_io(const std::string&) {}

namespace profile_detail {

int64_t first_bad_code(const std::vector<int8_t>& codes, int count) {
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] < 0 || codes[i] >= count) return static_cast<int64_t>(i);
  }
  return -1;
}

H5::StrType string_type() {
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(H5T_CSET_UTF8);
  return type;
}

std::mutex& hdf5_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::string join_path(const std::string& group, const std::string& name) {
  return group == "/" ? "/" + name : group + "/" + name;
}

std::string os_reason(int err) { return std::strerror(err); }

}  // namespace profile_detail
}  // namespace pstar::formats
