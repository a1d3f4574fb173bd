// Reads a `--metrics` file (JSON Lines) for the cmd tests.
#pragma once

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace pstar::cmd {

// One JSON object per non-empty line; none when the file does not exist (yet). A line that is not
// JSON fails the test. `all`: with the start-up record (`"record": "startup"`, written before the
// steps by `pstar train`); by default the step lines alone.
inline std::vector<nlohmann::json> read_metrics(const std::string& path, bool all = false) {
  std::vector<nlohmann::json> lines;
  if (!std::filesystem::exists(path)) return lines;
  std::istringstream in(pstar::testing::read_text(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      nlohmann::json record = nlohmann::json::parse(line);
      if (all || !record.contains("record")) lines.push_back(std::move(record));
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << path << ": not a JSON line: " << line << " (" << e.what() << ")";
    }
  }
  return lines;
}

}  // namespace pstar::cmd
