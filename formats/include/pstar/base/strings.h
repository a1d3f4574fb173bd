// Small string tests every layer needs (C++17 has no std::string::starts_with).
#pragma once

#include <string_view>

namespace pstar {

inline bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

inline bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace pstar
