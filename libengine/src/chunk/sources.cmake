target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/access_trace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eviction.cpp)
