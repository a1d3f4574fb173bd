target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/lr_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/loss_scaler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensorboard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/precision.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_facts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step_bound.cpp
  ${CMAKE_CURRENT_LIST_DIR}/speculation_policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/profiler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/same_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/build_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_step.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_run.cpp
  ${CMAKE_CURRENT_LIST_DIR}/torch_trace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/evaluate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer.cpp)
