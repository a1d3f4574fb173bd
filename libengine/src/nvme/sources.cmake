# The NVMe tier's I/O layer: pstar_nvme (defined in libengine/CMakeLists.txt), pure C++ with
# liburing where it was found (PSTAR_HAVE_LIBURING, cmake/dependencies.cmake); without it only the
# pread/pwrite backend is built.
target_sources(pstar_nvme PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/aligned_buffer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/channel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cleanup.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_dir.cpp
  ${CMAKE_CURRENT_LIST_DIR}/store.cpp
  ${CMAKE_CURRENT_LIST_DIR}/uring_channel.cpp)
target_include_directories(pstar_nvme PUBLIC ${CMAKE_CURRENT_LIST_DIR}/../../include)
target_link_libraries(pstar_nvme PUBLIC pstar::formats pstar::log Threads::Threads
                                 PRIVATE ZLIB::ZLIB)
if(PSTAR_HAVE_LIBURING)
  target_compile_definitions(pstar_nvme PRIVATE PSTAR_HAVE_LIBURING=1)
  target_link_libraries(pstar_nvme PRIVATE pstar_liburing)
else()
  target_compile_definitions(pstar_nvme PRIVATE PSTAR_HAVE_LIBURING=0)
endif()
pstar_set_warnings(pstar_nvme)
