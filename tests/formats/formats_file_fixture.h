// The scratch-directory fixture of the formats file tests (safetensors_test.cpp,
// file_io_test.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace pstar::formats::file_testing {

namespace fs = std::filesystem;

// Each test gets a fresh scratch directory.
class FormatsFileTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.file(name); }
  const fs::path& dir() const { return scratch_.path(); }

  std::vector<std::string> dir_entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir())) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  pstar::testing::ScratchDir scratch_;
};

}  // namespace pstar::formats::file_testing
