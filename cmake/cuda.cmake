# pstar_cuda (pstar::cuda): the CUDA kernels and runtime owners that the CUDA device tier will be
# built from (docs/cuda.md). It needs only the CUDA toolkit (nvcc and cudart), not a CUDA LibTorch,
# so it compiles on a machine without a GPU; PSTAR_WITH_CUDA (dependencies.cmake) is the separate
# switch for a CUDA LibTorch. Without a CUDA compiler, or with PSTAR_BUILD_CUDA_KERNELS=OFF, the
# target does not exist and nothing else changes: a CPU-only build is first class.
#
# nvcc's host compiler is the C++ compiler of the rest of the build, not whichever g++ is first on
# PATH, so the host code in .cu files has the same ABI and standard library. CUDAHOSTCXX (read by
# CMake's CUDA detection, including check_language's trial project) carries the choice; a
# CMAKE_CUDA_HOST_COMPILER or CUDAHOSTCXX given by the user wins. A host compiler that nvcc
# rejects makes the check fail, and the kernels are then off.
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND NOT DEFINED ENV{CUDAHOSTCXX})
  set(ENV{CUDAHOSTCXX} ${CMAKE_CXX_COMPILER})
endif()
include(CheckLanguage)
check_language(CUDA)
set(_pstar_cuda_kernels_default OFF)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "pstar: no working CUDA compiler (nvcc on PATH, CUDACXX or CMAKE_CUDA_COMPILER, "
                 "host compiler ${CMAKE_CXX_COMPILER}; CMakeFiles/CMakeError.log says why); the "
                 "CUDA kernels (pstar_cuda) are not built")
elseif(PSTAR_SANITIZE)
  # warnings.cmake adds -fsanitize=... to every compile line, and nvcc does not take it.
  message(STATUS "pstar: PSTAR_SANITIZE is on, so the CUDA kernels (pstar_cuda) are off by default")
else()
  set(_pstar_cuda_kernels_default ON)
endif()
option(PSTAR_BUILD_CUDA_KERNELS
       "Build pstar_cuda: CUDA kernels and runtime owners, without a CUDA LibTorch (docs/cuda.md)"
       ${_pstar_cuda_kernels_default})
if(NOT PSTAR_BUILD_CUDA_KERNELS)
  return()
endif()
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "PSTAR_BUILD_CUDA_KERNELS=ON but no CUDA compiler was found: put nvcc on PATH "
                      "or set CMAKE_CUDA_COMPILER, or configure with -DPSTAR_BUILD_CUDA_KERNELS=OFF.")
endif()

# Hopper (H100/H200) unless the user chose (-DCMAKE_CUDA_ARCHITECTURES=... or CUDAARCHS); it must
# be set before enable_language, which would otherwise pick the compiler's default.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of pstar_cuda")
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
find_package(CUDAToolkit REQUIRED)
# One CUDA runtime per process: the shared libcudart, the one a CUDA LibTorch loads too. CMake's
# default (Static) would put cudart_static on the link line of every executable that links
# pstar_cuda, beside CUDA::cudart; it is a property of the executables, so it is set for every
# target defined from here on.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
if(PSTAR_USE_CCACHE AND PSTAR_CCACHE)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${PSTAR_CCACHE})
endif()

# Paths from this file, not PROJECT_SOURCE_DIR: cmake/cuda-standalone/ includes it too.
get_filename_component(_pstar_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
add_library(pstar_cuda STATIC)
add_library(pstar::cuda ALIAS pstar_cuda)
include(${_pstar_root}/libengine/src/cuda/sources.cmake)
# The public headers (libengine/include/pstar/cuda/) include no CUDA header, so cudart stays
# private: code that uses pstar_cuda compiles without the toolkit's include directory.
target_include_directories(pstar_cuda PUBLIC ${_pstar_root}/libengine/include)
target_link_libraries(pstar_cuda PUBLIC pstar::formats PRIVATE CUDA::cudart)
set_target_properties(pstar_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(pstar_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
if(PSTAR_WERROR)
  target_compile_options(pstar_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                            $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
message(STATUS "pstar: CUDA kernels (pstar_cuda) ON: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
               "host compiler ${CMAKE_CUDA_HOST_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
