# cmake -DFUZZER=... -DSEEDS=... -DWORK=... -DSECONDS=... [-DDICT=...] [-DREPLAY_ENV=VAR=VALUE]
#       -P run_fuzz.cmake
# One fuzz.<target> test: fuzzes a fresh copy of the seed corpus (the repository's stays as it is)
# for SECONDS, and fails, naming the saved input, on any crash, sanitizer report, finding, hang or
# memory blow-up. REPLAY_ENV: first run every seed once, unmutated, with that variable set (the
# profile target's raw HDF5 seeds, which are not fuzzed; profile_fuzz.cpp).
foreach(var FUZZER SEEDS WORK SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake: -D${var}=... is missing")
  endif()
endforeach()
if(NOT EXISTS "${FUZZER}")
  message(FATAL_ERROR "${FUZZER} is not built; fuzz.build builds it (cmake --preset fuzz && "
                      "cmake --build --preset fuzz)")
endif()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/crashes")
file(COPY "${SEEDS}/" DESTINATION "${WORK}/corpus")

set(args
  -max_total_time=${SECONDS}
  # An input that takes 30 s is a hang (the slowest target, checkpoint, takes milliseconds).
  -timeout=30
  # Two of these run side by side on the 2-core, 24 GiB machines; LibTorch under ASan needs about
  # 1 GiB. A single allocation above this limit is a finding too (libFuzzer's -malloc_limit_mb).
  -rss_limit_mb=4096
  -print_final_stats=1
  -artifact_prefix=${WORK}/crashes/)
if(DEFINED DICT AND EXISTS "${DICT}")
  list(APPEND args -dict=${DICT})
endif()

set(rc 0)
if(DEFINED REPLAY_ENV)
  file(GLOB seeds "${WORK}/corpus/*")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "${REPLAY_ENV}" "${FUZZER}" -timeout=30
                          -rss_limit_mb=4096 -artifact_prefix=${WORK}/crashes/ ${seeds}
                  RESULT_VARIABLE rc)
endif()
if(rc EQUAL 0)
  execute_process(COMMAND "${FUZZER}" ${args} "${WORK}/corpus" RESULT_VARIABLE rc)
endif()
if(NOT rc EQUAL 0)
  file(GLOB saved "${WORK}/crashes/*")
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the input is saved as: ${saved}\n"
                      "Reproduce with: ${FUZZER} <that file>; docs/fuzzing.md says how to turn "
                      "it into a regression test.")
endif()
