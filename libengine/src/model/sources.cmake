target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/gpt.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt_shape.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decoder.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kv_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decoder_presets.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decoder_shape.cpp
  ${CMAKE_CURRENT_LIST_DIR}/family.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_decoder_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/moe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_shape.cpp
  ${CMAKE_CURRENT_LIST_DIR}/factory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hooks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_gpt2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/init.cpp
  ${CMAKE_CURRENT_LIST_DIR}/init_kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/init_kernel_avx2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/init_kernel_avx512.cpp)
# Note [counter-based init]: the generator's bits must not depend on the vector width the compiler
# picks, so no contracted multiply-adds; one file per instruction set with its own -m flags (as
# host Adam's, optim/sources.cmake), chosen at run time; no LibTorch, hence no precompiled header.
set(_pstar_init_fp_flags -ffp-contract=off -fno-math-errno)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/init_kernel.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "${_pstar_init_fp_flags}")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/init_kernel_avx2.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "${_pstar_init_fp_flags};-mavx2;-mfma;-mf16c")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/init_kernel_avx512.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "${_pstar_init_fp_flags};-mavx512f;-mavx512bw;-mavx512vl;-mavx2;-mfma;-mf16c")
