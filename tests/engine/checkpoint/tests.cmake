# The checkpoint module: a run's checkpoints saved and resumed (run_checkpoint_test.cpp), the
# directory's bookkeeping (store_test.cpp), the pieces of split modules' tensors in the index
# (index_pieces_test.cpp).
pstar_add_test(NAME engine_checkpoint_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/store_test.cpp ${CMAKE_CURRENT_LIST_DIR}/run_checkpoint_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/index_pieces_test.cpp
  LIBS pstar::engine)
# read_checkpoint_file on checkpoints whose pickle lies about its tensors (regressions found by
# tests/fuzz/checkpoint_fuzz; docs/fuzzing.md).
pstar_add_test(NAME engine_checkpoint_file_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/file_test.cpp
  LIBS pstar::engine)
