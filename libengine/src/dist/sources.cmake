target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/world.cpp
  ${CMAKE_CURRENT_LIST_DIR}/communicator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gloo_communicator.cpp)
