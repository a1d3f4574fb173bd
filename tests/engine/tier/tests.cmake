pstar_add_test(NAME engine_tier_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_tier_test.cpp ${CMAKE_CURRENT_LIST_DIR}/emulated_tier_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/speculative_adam_test.cpp
  LIBS pstar::engine)
# Chunk-engine training on the CUDA tier: runs where the build has it and a GPU is present, and
# reports Skipped with the reason everywhere else.
pstar_add_test(NAME engine_tier_gpu_tests LABEL gpu PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_training_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cuda_comm_stream_test.cpp
  LIBS pstar::engine)
