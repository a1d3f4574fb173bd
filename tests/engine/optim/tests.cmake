pstar_add_test(NAME engine_optim_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/host_adam_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/host_adam_redirect_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/host_adam_hold_test.cpp
  LIBS pstar::engine)
