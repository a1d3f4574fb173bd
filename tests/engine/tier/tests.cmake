pstar_add_test(NAME engine_tier_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_tier_test.cpp
  LIBS pstar::engine)
