# Pure C++: linked without LibTorch.
pstar_add_test(NAME engine_chunk_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/eviction_test.cpp
  LIBS pstar::placement)
