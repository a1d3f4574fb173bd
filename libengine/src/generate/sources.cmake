target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/sampling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/generator.cpp)
