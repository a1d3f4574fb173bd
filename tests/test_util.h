// Small helpers shared by pstar's tests: scratch directories and files.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pstar::testing {

// A fresh directory under the test temp dir, removed when the object goes away.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("pstar-") + (info ? info->name() : "test") + "-" +
                       std::to_string(getpid()) + "-" + std::to_string(counter++);
    std::replace(name.begin(), name.end(), '/', '_');  // parameterized test names contain '/'
    path_ = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A Python with torch: $PSTAR_PYTHON, python3 on the PATH, or Debian's (python3-torch); empty
// when there is none (tests then GTEST_SKIP, naming `apt-get install python3-torch`).
inline std::string python_with_torch() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("PSTAR_PYTHON")) candidates.emplace_back(p);
  candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
  for (const auto& python : candidates) {
    if (std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}

// What `command` prints on its standard output (its exit status is not checked: compare the
// output).
inline std::string command_output(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    ::pclose(pipe);
  }
  return out;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_text(path, std::string(bytes.begin(), bytes.end()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  const std::string text = read_text(path);
  return std::vector<uint8_t>(text.begin(), text.end());
}

// The message of the E that `f` throws; a test failure (and "") if it throws nothing.
template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception, but none was thrown";
  return "";
}

// A small, highly repetitive corpus: a model learns it within a few dozen steps.
inline std::string repetitive_corpus(int repeats = 200) {
  std::string text;
  for (int i = 0; i < repeats; ++i)
    text += "the quick brown fox jumps over the lazy dog. pack my box with five dozen jugs. ";
  return text;
}

}  // namespace pstar::testing
