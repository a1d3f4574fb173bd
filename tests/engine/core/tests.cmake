# engine_core_tests also loads a library that exports its own std::filesystem::remove_all, as
# LibTorch 2.x does, so link_test.cpp sees the clash on any machine (Note [libstdc++ before
# LibTorch]).
add_library(pstar_test_fs_clash SHARED ${CMAKE_CURRENT_LIST_DIR}/fs_clash.cpp)
pstar_add_test(NAME engine_core_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/link_test.cpp ${CMAKE_CURRENT_LIST_DIR}/device_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/blas_core_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/ordered_worker_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/setup_phases_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/parallel_fill_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/numa_test.cpp
  LIBS pstar::engine pstar_test_fs_clash ${CMAKE_DL_LIBS})
