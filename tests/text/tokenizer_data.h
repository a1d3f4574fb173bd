// Where the real tokenizer folders and their reference ids are (scripts/fetch-tokenizer-data.sh
// writes them), and reading the references, for the tests against real tokenizers.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "pstar/text/tokenizer.h"
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

// The tokenizer in `folder`, loaded once per test program (Gemma 3's file is 33 MB of JSON, a few
// seconds to load; the tests of a program share it).
inline const Tokenizer& cached_tokenizer(const std::string& folder) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[folder];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::load(folder));
  return *slot;
}

// A family's tokenizer as the fetch script laid it out: the tokenizer folder of
// scripts/tokenizer-data/reference.js when it has one (the same package's files), else the chat
// folder of chat_reference.js.
inline const Tokenizer& family_tokenizer(const std::string& family) {
  const std::filesystem::path own = std::filesystem::path(tokenizer_data_dir()) / family;
  return cached_tokenizer(
      std::filesystem::exists(own / "tokenizer.json")
          ? own.string()
          : (std::filesystem::path(tokenizer_data_dir()) / "chat" / family).string());
}

}  // namespace pstar::text::testing
