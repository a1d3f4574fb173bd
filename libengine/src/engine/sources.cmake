# The engines (ParamEngine: torch and chunked) and the chunk engine's parts. Placement is pure C++
# and lives in pstar_placement (libengine/CMakeLists.txt), with the eviction planner it uses.
target_sources(pstar_placement PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/placement.cpp)
target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/torch_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chunk_store.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chunk_store_spans.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nvme_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/group_sync.cpp
  ${CMAKE_CURRENT_LIST_DIR}/group_sync_queue.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hybrid_adam.cpp
  ${CMAKE_CURRENT_LIST_DIR}/adam_steps.cpp
  ${CMAKE_CURRENT_LIST_DIR}/speculation.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gradients.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grad_accumulator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/moments.cpp
  ${CMAKE_CURRENT_LIST_DIR}/evaluation.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chunked_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/registration.cpp)
