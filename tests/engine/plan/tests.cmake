pstar_add_test(NAME engine_plan_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_plan_test.cpp ${CMAKE_CURRENT_LIST_DIR}/run_plan_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/rank_device_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/estimate_test.cpp
  LIBS pstar::engine)
pstar_add_test(NAME engine_plan_validation_tests LABEL integration PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/validation_test.cpp
  LIBS pstar::engine)
