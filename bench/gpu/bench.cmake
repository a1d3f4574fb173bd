# pstar-bench-adam-kernel: the CUDA Adam kernel and the gradient sum of squares against a
# device-to-device copy and the device's peak bandwidth. Only when pstar_cuda is built
# (cmake/cuda.cmake); it needs nothing but pstar_cuda (no LibTorch), so cmake/cuda-standalone/
# builds it too. Without a device it says so and exits 0.
if(TARGET pstar_cuda)
  add_executable(pstar-bench-adam-kernel ${CMAKE_CURRENT_LIST_DIR}/adam_kernel_bench.cpp)
  target_link_libraries(pstar-bench-adam-kernel PRIVATE pstar::cuda)
  target_compile_options(pstar-bench-adam-kernel PRIVATE -Wall -Wextra -Wno-unused-parameter)
endif()
