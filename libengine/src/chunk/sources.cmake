# Pure C++ (no LibTorch): part of pstar_placement, which pstar_engine links.
target_sources(pstar_placement PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/access_trace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eviction.cpp)
