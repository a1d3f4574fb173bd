# The device tier (Note [device tier] in pstar/tier/device_tier.h): the interface and the emulated
# tier in every build; the CUDA tier when the build has both a CUDA LibTorch (PSTAR_WITH_CUDA,
# cmake/dependencies.cmake) and the CUDA kernels (pstar_cuda, cmake/cuda.cmake, included before
# libengine), otherwise entry points that say how to get it.
set(_pstar_tier_dir ${CMAKE_CURRENT_LIST_DIR})
target_sources(pstar_engine PRIVATE
  ${_pstar_tier_dir}/device_tier.cpp
  ${_pstar_tier_dir}/emulated_tier.cpp)
# The CUDA tier's files: the DeviceTier (allocation, copies, kernels) and the state its blocks
# share (streams, pending copies, the deferred release).
set(_pstar_cuda_tier_sources
  ${_pstar_tier_dir}/cuda_tier.cpp
  ${_pstar_tier_dir}/cuda_tier_state.cpp)
if(PSTAR_WITH_CUDA AND TARGET pstar_cuda)
  target_sources(pstar_engine PRIVATE ${_pstar_cuda_tier_sources})
  set_source_files_properties(${_pstar_cuda_tier_sources} PROPERTIES
    COMPILE_DEFINITIONS PSTAR_HAVE_CUDA_TIER=1)
  # The torch target already brings LibTorch's CUDA libraries (c10_cuda, torch_cuda).
  target_link_libraries(pstar_engine PRIVATE pstar::cuda CUDA::cudart)
  message(STATUS "pstar: CUDA device tier ON")
else()
  target_sources(pstar_engine PRIVATE ${_pstar_tier_dir}/cuda_tier_absent.cpp)
  if(PSTAR_WITH_CUDA)
    message(STATUS "pstar: a CUDA LibTorch but no CUDA kernels (PSTAR_BUILD_CUDA_KERNELS=OFF): "
                   "no CUDA device tier")
  endif()
endif()

# Where nvcc is but no CUDA LibTorch (e.g. Debian's CPU LibTorch 1.13, which still ships the c10/cuda
# headers), the CUDA tier's files are compiled, never linked, so that the CUDA tier's code keeps compiling on
# machines without a GPU. It runs only on a GPU machine with a CUDA LibTorch (docs/cuda.md).
option(PSTAR_CUDA_TIER_COMPILE_CHECK
       "Compile the CUDA device tier without linking it where there is no CUDA LibTorch" ON)
if(TARGET pstar_cuda AND NOT PSTAR_WITH_CUDA AND PSTAR_CUDA_TIER_COMPILE_CHECK)
  add_library(pstar_cuda_tier_compile_check OBJECT ${_pstar_cuda_tier_sources})
  target_compile_definitions(pstar_cuda_tier_compile_check PRIVATE PSTAR_HAVE_CUDA_TIER=1)
  # Only the usage requirements (include directories, definitions) of these: an object library
  # links nothing, and OPTIMIZE_DEPENDENCIES keeps it from waiting for them to be built.
  target_link_libraries(pstar_cuda_tier_compile_check PRIVATE
    torch pstar::formats pstar::cuda CUDA::cudart)
  target_include_directories(pstar_cuda_tier_compile_check PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_compile_options(pstar_cuda_tier_compile_check PRIVATE ${TORCH_CXX_FLAGS})
  set_target_properties(pstar_cuda_tier_compile_check PROPERTIES OPTIMIZE_DEPENDENCIES ON)
  pstar_set_warnings(pstar_cuda_tier_compile_check)
endif()
