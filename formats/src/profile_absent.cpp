// Profile files in builds without HDF5 (PSTAR_WITH_HDF5, cmake/dependencies.cmake), in place of
// profile/*.cpp: asking to write or read one says what this build lacks and how to get a build that
// has it.
#include "pstar/base/error.h"
#include "pstar/formats/profile.h"

namespace pstar::formats {

namespace {

[[noreturn]] void no_hdf5(const std::string& what) {
  PSTAR_THROW(ConfigError, what,
              ": this build of pstar has no HDF5 profile support (it was configured without "
              "HDF5). Install libhdf5-dev (scripts/setup-deps.sh installs it) and reconfigure "
              "with -DPSTAR_WITH_HDF5=ON (docs/profile.md).");
}

}  // namespace

bool profile_io_built() { return false; }

void require_profile_io(const std::string& what) { no_hdf5(what); }

void write_profile(const std::string& path, const Profile&) {
  no_hdf5("cannot write profile '" + path + "'");
}

Profile read_profile(const std::string& path) { no_hdf5("cannot read profile '" + path + "'"); }

void reseal_profile(const std::string& path) { no_hdf5("cannot reseal profile '" + path + "'"); }

}  // namespace pstar::formats
