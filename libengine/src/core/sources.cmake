# The logger is its own pure C++ target (pstar_log), which pstar_engine links.
target_sources(pstar_log PRIVATE ${CMAKE_CURRENT_LIST_DIR}/log.cpp)
target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ordered_worker.cpp)
