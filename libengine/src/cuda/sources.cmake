# pstar_cuda's sources (the target itself is defined in cmake/cuda.cmake, only when the CUDA kernels
# are built). Not part of pstar_engine: nothing here includes LibTorch.
set(_pstar_cuda_dir ${CMAKE_CURRENT_LIST_DIR})
target_sources(pstar_cuda PRIVATE
  ${_pstar_cuda_dir}/error.cpp
  ${_pstar_cuda_dir}/device.cpp
  ${_pstar_cuda_dir}/stream.cpp
  ${_pstar_cuda_dir}/first_fit.cpp
  ${_pstar_cuda_dir}/memory.cpp
  ${_pstar_cuda_dir}/adam.cpp
  ${_pstar_cuda_dir}/adam_kernel.cu
  ${_pstar_cuda_dir}/sq_sum.cpp
  ${_pstar_cuda_dir}/sq_sum_kernel.cu)
# Note [cuda adam bit identity] (adam_element.h): the kernel's arithmetic is spelled with
# round-to-nearest intrinsics, and these flags keep the rest of the file from contracting or
# approximating anything either. All but -fmad=false are nvcc's defaults; they are stated because
# source options come after CMAKE_CUDA_FLAGS and nvcc keeps an option's last value, so a global
# -use_fast_math cannot flush denormals or approximate division here. adam.cpp computes the
# step's coefficients on the host with the host Adam's flags. The gradient sum of squares is held
# to the host's bits the same way (Note [cuda grad sq sum order] in sq_sum_element.h); sq_sum.cpp
# adds its block sums on the host.
set_source_files_properties(${_pstar_cuda_dir}/adam_kernel.cu ${_pstar_cuda_dir}/sq_sum_kernel.cu
  PROPERTIES COMPILE_OPTIONS "-fmad=false;-ftz=false;-prec-div=true;-prec-sqrt=true")
set_source_files_properties(${_pstar_cuda_dir}/adam.cpp ${_pstar_cuda_dir}/sq_sum.cpp PROPERTIES
  COMPILE_OPTIONS "-ffp-contract=off;-fno-math-errno")
