// LeakSanitizer's built-in suppressions for the pstar binary of sanitizer builds (PSTAR_SANITIZE,
// the cpu-asan preset; cmd/CMakeLists.txt compiles this file only there). LSan calls this hook at
// start-up, so every run of the binary, under ctest or by hand, gets them without LSAN_OPTIONS.
//
// Only memory that system libraries keep for the life of the process, which pstar neither
// allocates nor can free, belongs here; each entry says where it was seen:
// - fontconfig's font cache and configuration, built when PLplot's cairo driver first lays out
//   text (every `pstar visualize` that draws a figure: about 50 KB in some 1,700 allocations);
// - libltdl's handles of the PLplot drivers it loads, kept until exit.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libfontconfig.so\n"
         "leak:libltdl.so\n";
}

// Without the table of suppressions used that LSan would print at exit of every such run.
extern "C" const char* __lsan_default_options() { return "print_suppressions=0"; }
