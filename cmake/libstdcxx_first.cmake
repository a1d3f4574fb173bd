# Note [libstdc++ before LibTorch]
# PyTorch's 2.x builds (libtorch.so, libtorch_cpu.so) export copies of libstdc++'s std::filesystem
# functions. The dynamic linker binds a symbol to the first library in the executable's NEEDED
# list that defines it, and the compiler driver appends -lstdc++ after every library a target
# names, so an executable's std::filesystem calls bind to LibTorch's copies, which crash (a jump
# to address 0 from remove_all). So every pstar binary, library or executable, names libstdc++
# first. Ubuntu's linker defaults to --as-needed, which drops a library given before the objects
# that use it: hence --no-as-needed around it. tests/CMakeLists.txt checks the NEEDED order of
# every executable (cmake/check_needed_order.cmake), and tests/engine/core/link_test.cpp checks
# where std::filesystem binds at run time.
#
# The shared library is named by its path, not as -lstdc++: a GCC whose driver links libstdc++
# statically by default (the GPU machines' /opt/gcc 13 does) turns -lstdc++ into the static archive,
# which at the front of the line contributes nothing, so the std::filesystem calls still bound to
# LibTorch's copies and every test that removed a scratch folder crashed there (issue 20).
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE _pstar_libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _pstar_libstdcxx_rc)
  if(_pstar_libstdcxx_rc EQUAL 0 AND IS_ABSOLUTE "${_pstar_libstdcxx}" AND
     EXISTS "${_pstar_libstdcxx}")
    get_filename_component(_pstar_libstdcxx "${_pstar_libstdcxx}" REALPATH)
  else()
    # A driver with no shared libstdc++ of its own: the system's, which LibTorch loads too.
    find_file(PSTAR_SYSTEM_LIBSTDCXX libstdc++.so.6
              PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} /usr/lib64 /usr/lib NO_DEFAULT_PATH)
    if(PSTAR_SYSTEM_LIBSTDCXX)
      set(_pstar_libstdcxx "${PSTAR_SYSTEM_LIBSTDCXX}")
    else()
      set(_pstar_libstdcxx "-lstdc++")
    endif()
  endif()
  message(STATUS "pstar: libstdc++ first on every link line: ${_pstar_libstdcxx}")
  add_link_options("LINKER:--push-state,--no-as-needed" "${_pstar_libstdcxx}" "LINKER:--pop-state")
endif()

# pstar_all_executables(out_var): every executable target defined under the source tree.
function(pstar_all_executables out_var)
  set(result "")
  set(dirs "${PROJECT_SOURCE_DIR}")
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
      get_target_property(type ${t} TYPE)
      if(type STREQUAL "EXECUTABLE")
        list(APPEND result ${t})
      endif()
    endforeach()
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
  endwhile()
  set(${out_var} ${result} PARENT_SCOPE)
endfunction()
