pstar_add_test(NAME engine_memory_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/host_pool_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/exact_size_pool_test.cpp
  LIBS pstar::engine)
