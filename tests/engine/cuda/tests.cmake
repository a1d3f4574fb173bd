# pstar_cuda (docs/cuda.md), only when it is built (cmake/cuda.cmake).
if(NOT TARGET pstar_cuda)
  return()
endif()

# No device needed: the kernel's arithmetic emulated on the CPU against host Adam, the arena's
# bookkeeping, the device query and the error mapping. adam_emulation_test.cpp compiles the
# kernel's private adam_element.h for the host with host Adam's flags (-ffp-contract=off), so it
# cannot share the engine's precompiled header.
# The same holds for the gradient sum of squares (sq_sum_element.h, sq_sum_emulation_test.cpp).
pstar_add_test(NAME engine_cuda_host_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/adam_emulation_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/sq_sum_emulation_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/first_fit_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/runtime_host_test.cpp
  LIBS pstar::cuda pstar::engine)
target_include_directories(engine_cuda_host_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../../../libengine/src/cuda)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/adam_emulation_test.cpp
                            ${CMAKE_CURRENT_LIST_DIR}/sq_sum_emulation_test.cpp PROPERTIES
  COMPILE_OPTIONS "-ffp-contract=off;-fno-math-errno")

# On a device: skipped, with the reason, where there is none. The engine is linked for host Adam
# and host grad_sq_sum, the references of the kernel tests; cudart for the legacy default stream
# (adam_step's raw-stream overload), and the private sq_sum_launch.h for a small grid.
pstar_add_test(NAME engine_cuda_tests LABEL gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/adam_kernel_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/sq_sum_kernel_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/runtime_test.cpp
  LIBS pstar::cuda pstar::engine CUDA::cudart)
target_include_directories(engine_cuda_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../../../libengine/src/cuda)
