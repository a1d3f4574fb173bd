// Helpers shared by the benchmarks in bench/.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>

namespace pstar::bench {

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

}  // namespace pstar::bench
