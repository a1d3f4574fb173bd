target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/token_source.cpp
  ${CMAKE_CURRENT_LIST_DIR}/batch_sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eval_windows.cpp
  ${CMAKE_CURRENT_LIST_DIR}/record_source.cpp
  ${CMAKE_CURRENT_LIST_DIR}/record_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/record_sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/training_data.cpp)
