target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/host_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_counter.cpp)
