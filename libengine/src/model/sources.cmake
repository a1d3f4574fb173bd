target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/gpt.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt_shape.cpp
  ${CMAKE_CURRENT_LIST_DIR}/llama.cpp
  ${CMAKE_CURRENT_LIST_DIR}/llama_shape.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_shape.cpp
  ${CMAKE_CURRENT_LIST_DIR}/factory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hooks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_gpt2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_weights.cpp)
