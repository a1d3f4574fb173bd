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
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  add_link_options("LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
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
