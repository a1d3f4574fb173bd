// Runs tests/cmd/tensorboard_reader.py, the independent reader of TensorBoard event files, for the
// cmd tests that write them (tensorboard_test.cpp, eval_cli_test.cpp, train_dist_test.cpp).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::cmd {

// A Python with python3-protobuf: $PSTAR_PYTHON, python3 on the PATH, or Debian's; empty when there
// is none (the tests then GTEST_SKIP with kNoProtobuf).
inline std::string protobuf_python() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("PSTAR_PYTHON")) candidates.emplace_back(p);
  candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
  for (const auto& python : candidates)
    if (std::system((python + " -c 'import google.protobuf' >/dev/null 2>&1").c_str()) == 0)
      return python;
  return "";
}
inline constexpr const char* kNoProtobuf =
    "no Python with google.protobuf to read the event files (Debian: apt-get install "
    "python3-protobuf; scripts/setup-deps.sh installs it)";

struct ReaderResult {
  int exit_code = -1;
  nlohmann::json summary;  // files (path, steps, session_start, config), tags, compared
  std::string err;
};

// tensorboard_reader.py DIR METRICS... [--keys KEYS], run in `cwd` (its outputs go there too).
inline ReaderResult read_tensorboard(const std::string& python, const std::filesystem::path& cwd,
                                     const std::string& dir,
                                     const std::vector<std::string>& metrics,
                                     const std::string& keys = "") {
  const std::string out = (cwd / "reader.out").string(), err = (cwd / "reader.err").string();
  std::string command = "cd '" + cwd.string() + "' && " + python +
                        " " PSTAR_SOURCE_DIR "/tests/cmd/tensorboard_reader.py '" + dir + "'";
  for (const std::string& m : metrics) command += " '" + m + "'";
  if (!keys.empty()) command += " --keys " + keys;
  command += " >'" + out + "' 2>'" + err + "'";
  ReaderResult r;
  const int status = std::system(command.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = pstar::testing::read_text(err);
  try {
    r.summary = nlohmann::json::parse(pstar::testing::read_text(out));
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "tensorboard_reader.py printed no summary: " << e.what() << "\n" << r.err;
  }
  return r;
}

}  // namespace pstar::cmd
