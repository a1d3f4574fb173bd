target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/world.cpp
  ${CMAKE_CURRENT_LIST_DIR}/communicator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gloo_communicator.cpp)

# The NCCL communicator (Note [device collectives] in pstar/dist/communicator.h) needs c10d's
# ProcessGroupNCCL, which only a CUDA LibTorch has, and NCCL's header (the CUDA toolkit's, or the
# nvidia-nccl wheel's beside PyTorch's). LibTorch 1.13's NCCL group is not supported: pstar's GPU
# builds are 2.x (scripts/gpu-verify.sh).
set(_pstar_nccl_comm ${CMAKE_CURRENT_LIST_DIR}/nccl_communicator.cpp)
find_path(PSTAR_NCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
        ${Python3_SITELIB}/nvidia/nccl/include
  DOC "The directory of nccl.h, for the NCCL communicator")
if(PSTAR_WITH_CUDA AND PSTAR_WITH_NCCL AND Torch_VERSION VERSION_GREATER_EQUAL 2.0
   AND PSTAR_NCCL_INCLUDE_DIR)
  target_sources(pstar_engine PRIVATE ${_pstar_nccl_comm})
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/communicator.cpp PROPERTIES
    COMPILE_DEFINITIONS PSTAR_HAVE_NCCL_COMMUNICATOR=1)
  set_source_files_properties(${_pstar_nccl_comm} PROPERTIES
    COMPILE_DEFINITIONS USE_C10D_NCCL INCLUDE_DIRECTORIES ${PSTAR_NCCL_INCLUDE_DIR})
  message(STATUS "pstar: NCCL communicator ON (nccl.h in ${PSTAR_NCCL_INCLUDE_DIR})")
elseif(PSTAR_WITH_CUDA AND PSTAR_WITH_NCCL)
  message(STATUS "pstar: no NCCL communicator: it needs LibTorch 2.x (found ${Torch_VERSION}) "
                 "and nccl.h (PSTAR_NCCL_INCLUDE_DIR: ${PSTAR_NCCL_INCLUDE_DIR})")
endif()

# Where nvcc and nccl.h are but no CUDA LibTorch (Debian's CPU LibTorch still ships c10d's and
# c10/cuda's headers), the NCCL communicator is compiled, never linked, as the CUDA tier is
# (tier/sources.cmake), so that it keeps compiling on machines without a GPU.
if(TARGET pstar_cuda AND NOT PSTAR_WITH_CUDA AND PSTAR_CUDA_TIER_COMPILE_CHECK
   AND PSTAR_NCCL_INCLUDE_DIR)
  add_library(pstar_nccl_communicator_compile_check OBJECT ${_pstar_nccl_comm})
  target_compile_definitions(pstar_nccl_communicator_compile_check PRIVATE USE_C10D_NCCL)
  target_link_libraries(pstar_nccl_communicator_compile_check PRIVATE
    torch pstar::formats CUDA::cudart)
  target_include_directories(pstar_nccl_communicator_compile_check PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/include ${PSTAR_NCCL_INCLUDE_DIR})
  target_compile_options(pstar_nccl_communicator_compile_check PRIVATE ${TORCH_CXX_FLAGS})
  set_target_properties(pstar_nccl_communicator_compile_check PROPERTIES
    OPTIMIZE_DEPENDENCIES ON)
  pstar_set_warnings(pstar_nccl_communicator_compile_check)
endif()
