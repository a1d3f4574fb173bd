target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/token_source.cpp
  ${CMAKE_CURRENT_LIST_DIR}/batch_sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eval_windows.cpp)
