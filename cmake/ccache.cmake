# ccache with precompiled headers needs these sloppiness settings, or every PCH user misses.
if(PSTAR_USE_CCACHE)
  find_program(PSTAR_CCACHE ccache)
  if(PSTAR_CCACHE)
    set(CMAKE_CXX_COMPILER_LAUNCHER
        ${CMAKE_COMMAND} -E env "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        ${PSTAR_CCACHE})
    message(STATUS "pstar: compiling through ${PSTAR_CCACHE}")
  endif()
endif()
