# Pure C++ (pstar_nvme links no LibTorch): these build in seconds.
pstar_add_test(NAME engine_nvme_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/store_test.cpp ${CMAKE_CURRENT_LIST_DIR}/fault_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/lifetime_test.cpp
  LIBS pstar::nvme)
