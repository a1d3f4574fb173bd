# Third-party packages. All come from Debian 12 (scripts/setup-deps.sh) except an optional
# CUDA LibTorch, found through CMAKE_PREFIX_PATH.
#
# PSTAR_DEPS_DIR: a folder of unpacked packages for machines without a package manager that serves
# them (the GPU machines: scripts/gpu-deps.sh fills one from Debian's -dev packages with
# `dpkg -x`). Its usr/ is searched for CMake packages and headers, and its usr/src/googletest is
# built when no GoogleTest is installed.
set(PSTAR_DEPS_DIR "$ENV{PSTAR_DEPS_DIR}" CACHE PATH
    "A folder of unpacked dependency packages (dpkg -x), searched before the system")
if(PSTAR_DEPS_DIR)
  get_filename_component(PSTAR_DEPS_DIR "${PSTAR_DEPS_DIR}" ABSOLUTE)
  if(NOT IS_DIRECTORY "${PSTAR_DEPS_DIR}/usr")
    message(FATAL_ERROR "PSTAR_DEPS_DIR=${PSTAR_DEPS_DIR} has no usr/ folder: fill it with "
                        "scripts/gpu-deps.sh (dpkg -x of Debian packages), or leave it unset")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${PSTAR_DEPS_DIR}/usr")
endif()

find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)

# A CUDA LibTorch's Caffe2 configuration appends its own -gencode flags (for the GPU it detects, or
# TORCH_CUDA_ARCH_LIST) to CMAKE_CUDA_FLAGS and may set CMAKE_CUDA_ARCHITECTURES. pstar_cuda was
# defined by cmake/cuda.cmake before this, with pstar's architectures (sm_90 unless the user chose);
# restoring both keeps LibTorch's choice off pstar's kernels.
set(_pstar_cuda_flags_before "${CMAKE_CUDA_FLAGS}")
set(_pstar_cuda_archs_before "${CMAKE_CUDA_ARCHITECTURES}")
find_package(Torch REQUIRED)
set(CMAKE_CUDA_FLAGS "${_pstar_cuda_flags_before}")
if(_pstar_cuda_archs_before)
  set(CMAKE_CUDA_ARCHITECTURES "${_pstar_cuda_archs_before}")
endif()

# HDF5 writes and reads profile files (formats/src/profile/); PLplot's C API draws
# `pstar visualize`'s figures (PNG, SVG and PDF through its cairo drivers, plplot-driver-cairo,
# loaded at run time; Debian ships no CMake config for it, only plplot.pc). Both are optional: a
# build without HDF5 has no `pstar profile`, `train --profile` or `visualize`, one without PLplot no
# `visualize`, and those commands say so. Debian's packages are found by default; ON makes their
# absence an error, OFF leaves them out even where they are installed.
set(PSTAR_WITH_HDF5 "AUTO" CACHE STRING "Profiles in HDF5 (pstar profile, visualize): AUTO, ON or OFF")
set(PSTAR_WITH_PLPLOT "AUTO" CACHE STRING "pstar visualize's figures through PLplot: AUTO, ON or OFF")
set_property(CACHE PSTAR_WITH_HDF5 PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE PSTAR_WITH_PLPLOT PROPERTY STRINGS AUTO ON OFF)
set(PSTAR_HAVE_HDF5 OFF)
if(NOT PSTAR_WITH_HDF5 STREQUAL "OFF")
  # The CXX component brings the C library too (HDF5::HDF5 holds both); asking for C as well would
  # need the C language enabled.
  if(PSTAR_WITH_HDF5 STREQUAL "ON")
    find_package(HDF5 REQUIRED COMPONENTS CXX)
  else()
    find_package(HDF5 QUIET COMPONENTS CXX)
  endif()
  if(HDF5_FOUND AND TARGET HDF5::HDF5)
    set(PSTAR_HAVE_HDF5 ON)
  endif()
endif()
set(PSTAR_HAVE_PLPLOT OFF)
if(NOT PSTAR_WITH_PLPLOT STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    if(PSTAR_WITH_PLPLOT STREQUAL "ON")
      pkg_check_modules(PLPLOT REQUIRED IMPORTED_TARGET plplot)
    else()
      pkg_check_modules(PLPLOT QUIET IMPORTED_TARGET plplot)
    endif()
  elseif(PSTAR_WITH_PLPLOT STREQUAL "ON")
    message(FATAL_ERROR "PSTAR_WITH_PLPLOT=ON needs pkg-config to find PLplot (plplot.pc)")
  endif()
  if(PLPLOT_FOUND AND PSTAR_HAVE_HDF5)
    set(PSTAR_HAVE_PLPLOT ON)
  elseif(PLPLOT_FOUND)
    message(STATUS "pstar: PLplot found but no HDF5: visualize reads HDF5 profiles, so it is off")
  endif()
endif()
if(NOT PSTAR_HAVE_HDF5)
  message(STATUS "pstar: no HDF5 (libhdf5-dev): pstar profile, train --profile and visualize will "
                 "say that this build lacks it")
elseif(NOT PSTAR_HAVE_PLPLOT)
  message(STATUS "pstar: no PLplot (libplplot-dev): pstar visualize will say that this build lacks it")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/text_deps.cmake)  # PCRE2 and utf8proc, for text/

# liburing (Debian's liburing-dev) runs the NVMe tier's I/O through io_uring (libengine/src/nvme).
# Optional as HDF5 is: without it the tier moves its data with pread/pwrite threads only; ON makes
# its absence an error, OFF leaves it out. pkg-config gives the usual location; the static archive
# is preferred, so that the programs need no extra shared library at run time (the GPU machines
# take it from PSTAR_DEPS_DIR, scripts/gpu-deps.sh).
set(PSTAR_WITH_LIBURING "AUTO" CACHE STRING "The NVMe tier's io_uring backend: AUTO, ON or OFF")
set_property(CACHE PSTAR_WITH_LIBURING PROPERTY STRINGS AUTO ON OFF)
set(PSTAR_HAVE_LIBURING OFF)
if(NOT PSTAR_WITH_LIBURING STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(PC_LIBURING QUIET liburing)
  endif()
  find_path(PSTAR_LIBURING_INCLUDE_DIR liburing.h HINTS ${PC_LIBURING_INCLUDE_DIRS})
  find_library(PSTAR_LIBURING_LIBRARY NAMES liburing.a uring HINTS ${PC_LIBURING_LIBRARY_DIRS})
  if(PSTAR_LIBURING_INCLUDE_DIR AND PSTAR_LIBURING_LIBRARY)
    set(PSTAR_HAVE_LIBURING ON)
    add_library(pstar_liburing INTERFACE IMPORTED)
    target_include_directories(pstar_liburing INTERFACE ${PSTAR_LIBURING_INCLUDE_DIR})
    target_link_libraries(pstar_liburing INTERFACE ${PSTAR_LIBURING_LIBRARY})
  elseif(PSTAR_WITH_LIBURING STREQUAL "ON")
    message(FATAL_ERROR "PSTAR_WITH_LIBURING=ON but no liburing (liburing.h, liburing.a): install "
                        "liburing-dev (scripts/setup-deps.sh)")
  endif()
endif()
if(NOT PSTAR_HAVE_LIBURING)
  message(STATUS "pstar: no liburing (liburing-dev, or PSTAR_WITH_LIBURING=OFF): the NVMe tier's "
                 "I/O will use pread/pwrite threads only")
endif()

# zlib's CRC-32 checks checkpoint files; the visualize tests inflate the PNGs they check.
find_package(ZLIB REQUIRED)
if(PSTAR_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    set(PSTAR_GTEST_SOURCE_DIR "" CACHE PATH "A GoogleTest source tree, when none is installed")
    if(NOT PSTAR_GTEST_SOURCE_DIR AND PSTAR_DEPS_DIR AND
       EXISTS "${PSTAR_DEPS_DIR}/usr/src/googletest/CMakeLists.txt")
      set(PSTAR_GTEST_SOURCE_DIR "${PSTAR_DEPS_DIR}/usr/src/googletest")
    endif()
    if(NOT PSTAR_GTEST_SOURCE_DIR)
      message(FATAL_ERROR "no GoogleTest: install libgtest-dev (scripts/setup-deps.sh), pass "
                          "-DPSTAR_GTEST_SOURCE_DIR=<a googletest source tree>, or give a "
                          "PSTAR_DEPS_DIR holding usr/src/googletest; or -DPSTAR_BUILD_TESTS=OFF")
    endif()
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${PSTAR_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
    if(NOT TARGET GTest::gtest)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
    endif()
  endif()
endif()

# CUDA and NCCL default to what is found: a CPU-only build is first class.
set(_pstar_cuda_default OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(_pstar_cuda_default ON)
endif()
option(PSTAR_WITH_CUDA "Build the CUDA device tier (needs a CUDA LibTorch)" ${_pstar_cuda_default})
# A CUDA LibTorch brings c10d's NCCL group and the NCCL library it loads; pstar needs only NCCL's
# header beside it (libengine/src/dist/sources.cmake finds it).
option(PSTAR_WITH_NCCL "Build the NCCL communicator (needs a CUDA LibTorch 2.x and nccl.h)"
       ${_pstar_cuda_default})
if(PSTAR_WITH_CUDA AND NOT _pstar_cuda_default)
  message(FATAL_ERROR "PSTAR_WITH_CUDA=ON but the LibTorch found (${Torch_DIR}) has no CUDA. "
                      "Point CMAKE_PREFIX_PATH at a CUDA LibTorch, or configure with -DPSTAR_WITH_CUDA=OFF.")
endif()
