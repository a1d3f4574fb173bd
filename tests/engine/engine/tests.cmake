# Placement alone: pure C++, linked without LibTorch (only pstar::placement and pstar::formats).
pstar_add_test(NAME engine_placement_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/placement_test.cpp
  LIBS pstar::placement)
# The chunk engine against the torch engine, through the trainer.
pstar_add_test(NAME engine_chunked_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chunked_engine_test.cpp
  LIBS pstar::engine nlohmann_json::nlohmann_json)
# The decoder families through the trainer and both engines: Llama's budgets, resume and folders,
# every family against tests/reference/decoder_reference.py's float64 losses, and the mixtures of
# experts' aux loss, fused experts and routing that the data decides.
pstar_add_test(NAME engine_decoder_training_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_training_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/family_training_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/moe_training_test.cpp
  LIBS pstar::engine nlohmann_json::nlohmann_json)
# The chunk engine with its NVMe tier (engine.nvme_path), through the trainer.
pstar_add_test(NAME engine_nvme_training_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/nvme_training_test.cpp
  LIBS pstar::engine)
# Note [counter-based init]: the initial values through both engines, budgets and thread counts,
# and on two forked ranks.
pstar_add_test(NAME engine_init_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/init_parity_test.cpp
  LIBS pstar::engine)
pstar_add_test(NAME engine_init_ranks_tests LABEL multiprocess PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/init_ranks_test.cpp
  LIBS pstar::engine)
# ZeRO on four ranks as threads of one process (engine/dist/thread_ranks.h): ownership, the
# collectives and the losses against one rank; the collectives beside compute against the same on
# the main thread; modules split over the ranks (Note [split modules]).
pstar_add_test(NAME engine_thread_ranks_tests LABEL unit PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/thread_ranks_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/comm_beside_compute_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/split_modules_test.cpp
  LIBS pstar::engine)
# Note [one accumulator per tensor]: a tensor keeps its gradient accumulator across moves.
pstar_add_test(NAME engine_grad_accumulator_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/grad_accumulator_test.cpp
  LIBS pstar::engine)
target_include_directories(engine_grad_accumulator_tests
  PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../../../libengine/src/engine)
