target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/sampling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/generator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_source.cpp
  ${CMAKE_CURRENT_LIST_DIR}/text_side.cpp
  ${CMAKE_CURRENT_LIST_DIR}/session.cpp)
