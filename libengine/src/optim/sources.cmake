# Host Adam: a baseline dispatcher with the scalar reference kernel, and one file per vector ISA with
# its own -m flags (chosen at run time, so the library itself stays baseline x86-64).
# -ffp-contract=off on all three keeps every ISA bit-identical: the only fused multiply-adds are the
# explicit ones (Note [host adam bit identity]).
# They include no LibTorch, and their flags differ from the precompiled header's, so they skip it.
set(_pstar_host_adam_dir ${CMAKE_CURRENT_LIST_DIR})
target_sources(pstar_engine PRIVATE
  ${_pstar_host_adam_dir}/host_adam.cpp
  ${_pstar_host_adam_dir}/host_adam_avx2.cpp
  ${_pstar_host_adam_dir}/host_adam_avx512.cpp)
set(_pstar_host_adam_fp_flags -ffp-contract=off -fno-math-errno)
set_source_files_properties(${_pstar_host_adam_dir}/host_adam.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "${_pstar_host_adam_fp_flags};-fopenmp")
set_source_files_properties(${_pstar_host_adam_dir}/host_adam_avx2.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "${_pstar_host_adam_fp_flags};-mavx2;-mfma;-mf16c")
set_source_files_properties(${_pstar_host_adam_dir}/host_adam_avx512.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "${_pstar_host_adam_fp_flags};-mavx512f;-mavx512bw;-mavx512vl;-mavx2;-mfma;-mf16c")

# OpenMP for the parallel loops in host_adam.cpp only (-fopenmp above): linking the target with
# OpenMP::OpenMP_CXX's compile flags would change every engine source's flags and with them the
# precompiled header that tests and tools reuse. LibTorch already uses the same libgomp.
find_package(OpenMP REQUIRED)
target_link_libraries(pstar_engine PRIVATE $<LINK_ONLY:OpenMP::OpenMP_CXX>)
