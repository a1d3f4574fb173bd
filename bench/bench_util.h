// Helpers shared by the benchmarks in bench/.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace pstar::bench {

// A benchmark's options: "--key value" pairs, each handed to its handler. --help (or -h) prints
// `usage` and exits 0; an unknown option, one left without its value, or a value its handler
// cannot read exits 2 naming it, instead of running minutes of measurement with the defaults.
using OptionHandlers = std::vector<std::pair<std::string, std::function<void(const std::string&)>>>;

inline void parse_options(int argc, char** argv, const char* usage,
                          const OptionHandlers& handlers) {
  auto refuse = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s\nusage: %s\n", argv[0], why.c_str(), usage);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s\n", usage);
      std::exit(0);
    }
  }
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    const auto handler = std::find_if(handlers.begin(), handlers.end(),
                                      [&](const auto& h) { return h.first == key; });
    if (handler == handlers.end()) refuse("unknown option " + key);
    if (i + 1 == argc) refuse("option " + key + " needs a value");
    try {
      handler->second(argv[i + 1]);
    } catch (const std::exception& e) {
      refuse("option " + key + ": cannot read '" + argv[i + 1] + "' (" + e.what() + ")");
    }
  }
}

// 1 MiB of random bytes in a temporary text file, removed when the benchmark ends.
struct TempCorpus {
  std::filesystem::path path;

  explicit TempCorpus(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("pstar-bench-" + name + "-" + std::to_string(::getpid()) + ".txt")) {
    std::ofstream out(path, std::ios::binary);
    std::mt19937 rng(1);
    for (int i = 0; i < (1 << 20); ++i) out.put(static_cast<char>(rng() % 256));
  }
  ~TempCorpus() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
  TempCorpus(const TempCorpus&) = delete;
  TempCorpus& operator=(const TempCorpus&) = delete;
};

// Runs a program (argv[0] a path) and waits: its exit code, or 128 + the signal that ended it.
// `usage`, when given, receives the child's resource usage (page faults, CPU time); a non-empty
// `stderr_path` receives the child's standard error (truncated first).
inline int run_program(const std::vector<std::string>& args, struct rusage* usage = nullptr,
                       const std::string& stderr_path = "") {
  std::vector<std::string> storage(args);
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (!stderr_path.empty()) {
      const int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(126);
      close(fd);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage ignored {};
  if (pid < 0 || wait4(pid, &status, 0, usage != nullptr ? usage : &ignored) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The median (0 for none; the mean of the middle two for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Each line of a text file.
inline std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace pstar::bench
