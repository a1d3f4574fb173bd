// Where the real tokenizer folders and their reference ids are (scripts/fetch-tokenizer-data.sh
// writes them), and reading the references, for the tests against real tokenizers.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "pstar_test_paths.h"

namespace pstar::text::testing {

// $PSTAR_TOKENIZER_DATA, else the repository's .cache/tokenizers.
inline std::string tokenizer_data_dir() {
  const char* env = std::getenv("PSTAR_TOKENIZER_DATA");
  return env && *env ? env : PSTAR_SOURCE_DIR "/.cache/tokenizers";
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  return nlohmann::json::parse(read_file(path));
}

}  // namespace pstar::text::testing
