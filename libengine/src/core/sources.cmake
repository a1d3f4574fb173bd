target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/log.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ordered_worker.cpp)
