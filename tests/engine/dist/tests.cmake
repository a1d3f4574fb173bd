pstar_add_test(NAME engine_dist_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/world_test.cpp ${CMAKE_CURRENT_LIST_DIR}/nccl_missing_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/thread_ranks_test.cpp
  LIBS pstar::engine)
# The collectives between forked processes.
pstar_add_test(NAME engine_dist_comm_tests LABEL multiprocess
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/communicator_test.cpp
  LIBS pstar::engine)
# The NCCL communicator on one GPU: runs where the build has it and a GPU is present, and reports
# Skipped with the reason everywhere else.
pstar_add_test(NAME engine_dist_gpu_tests LABEL gpu PCH
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_communicator_gpu_test.cpp
  LIBS pstar::engine)
