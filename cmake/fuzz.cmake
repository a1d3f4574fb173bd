# The fuzz tree (PSTAR_FUZZ=ON, the `fuzz` preset; docs/fuzzing.md): libFuzzer targets for every
# reader of outside input, under AddressSanitizer and UBSan. Only what they need is built: formats,
# libengine's checkpoint.cpp (with its logger), text (the tokenizers) and tests/fuzz. The normal build never takes this path.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "PSTAR_FUZZ needs clang for libFuzzer, but the C++ compiler is "
                      "${CMAKE_CXX_COMPILER_ID} (${CMAKE_CXX_COMPILER}); configure with "
                      "`cmake --preset fuzz` (scripts/setup-deps.sh installs clang)")
endif()

# Sanitizer flags of everything built here. Libraries get libFuzzer's coverage instrumentation
# only (fuzzer-no-link); each fuzz target links libFuzzer's main (tests/fuzz/CMakeLists.txt).
# -fno-sanitize-recover: a UBSan finding stops the run like an ASan one, instead of a line of
# output that a long campaign scrolls past.
set(PSTAR_FUZZ_SANITIZERS -fsanitize=address,undefined -fno-sanitize-recover=undefined)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,undefined")
check_cxx_source_compiles([[
  #include <cstddef>
  #include <cstdint>
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]] PSTAR_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT PSTAR_HAVE_LIBFUZZER)
  message(FATAL_ERROR "${CMAKE_CXX_COMPILER} cannot link -fsanitize=fuzzer,address,undefined: "
                      "the compiler-rt runtimes are missing (Debian: libclang-rt-14-dev; "
                      "scripts/setup-deps.sh installs it)")
endif()

add_compile_options(-fsanitize=fuzzer-no-link ${PSTAR_FUZZ_SANITIZERS} -fno-omit-frame-pointer)
add_link_options(${PSTAR_FUZZ_SANITIZERS})

find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Torch REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)  # checkpoint.cpp's CRC-32
include(${CMAKE_CURRENT_LIST_DIR}/text_deps.cmake)  # the tokenizer target

include(${CMAKE_CURRENT_LIST_DIR}/warnings.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/libstdcxx_first.cmake)

add_subdirectory(formats)
add_subdirectory(text)
add_subdirectory(tests/fuzz)
message(STATUS "pstar: fuzz targets (libFuzzer + ASan + UBSan) with LibTorch ${Torch_VERSION}")
