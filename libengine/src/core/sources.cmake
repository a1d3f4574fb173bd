# The logger is its own pure C++ target (pstar_log), which pstar_engine links.
target_sources(pstar_log PRIVATE ${CMAKE_CURRENT_LIST_DIR}/log.cpp)
target_sources(pstar_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/blas_core.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parallel_fill.cpp
  ${CMAKE_CURRENT_LIST_DIR}/setup_phases.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/numa.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ordered_worker.cpp)
# at::parallel_for's `#pragma omp parallel` is compiled where it is called: without -fopenmp it runs
# on one thread (Note [parallel first touch]). Other flags than the precompiled header's, so none.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/parallel_fill.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "-fopenmp")
