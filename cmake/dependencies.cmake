# Third-party packages. All come from Debian 12 (scripts/setup-deps.sh) except an optional
# CUDA LibTorch, found through CMAKE_PREFIX_PATH.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Torch REQUIRED)
# HDF5 writes and reads profile files (formats/src/profile.cpp). The CXX component brings the C
# library too (HDF5::HDF5 holds both); asking for C as well would need the C language enabled.
find_package(HDF5 REQUIRED COMPONENTS CXX)
# PLplot's C API draws `pstar visualize`'s figures (PNG, SVG and PDF through its cairo drivers,
# plplot-driver-cairo, loaded at run time). Debian ships no CMake config for it, only plplot.pc.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PLPLOT REQUIRED IMPORTED_TARGET plplot)
# zlib's CRC-32 checks checkpoint files; the visualize tests inflate the PNGs they check.
find_package(ZLIB REQUIRED)
if(PSTAR_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# CUDA and NCCL default to what is found: a CPU-only build is first class.
include(CheckLanguage)
set(_pstar_cuda_default OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(_pstar_cuda_default ON)
endif()
option(PSTAR_WITH_CUDA "Build the CUDA device tier (needs a CUDA LibTorch)" ${_pstar_cuda_default})
find_library(PSTAR_NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
set(_pstar_nccl_default OFF)
if(PSTAR_WITH_CUDA AND PSTAR_NCCL_LIBRARY)
  set(_pstar_nccl_default ON)
endif()
option(PSTAR_WITH_NCCL "Build NCCL collectives" ${_pstar_nccl_default})
if(PSTAR_WITH_CUDA AND NOT _pstar_cuda_default)
  message(FATAL_ERROR "PSTAR_WITH_CUDA=ON but the LibTorch found (${Torch_DIR}) has no CUDA. "
                      "Point CMAKE_PREFIX_PATH at a CUDA LibTorch, or configure with -DPSTAR_WITH_CUDA=OFF.")
endif()
