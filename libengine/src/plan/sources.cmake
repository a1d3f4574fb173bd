target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/memory_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chunk_layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fit.cpp
  ${CMAKE_CURRENT_LIST_DIR}/activations.cpp
  ${CMAKE_CURRENT_LIST_DIR}/estimate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rank_device.cpp)
