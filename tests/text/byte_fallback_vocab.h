// The start of a Gemma-shaped code-point vocabulary that the small tokenizers of the text tests
// share: 0 <unk>, then 1 + b for each byte b's <0xNN> entry (byte fallback).
#pragma once

#include <cstdio>

#include <nlohmann/json.hpp>

namespace pstar::text::testing {

inline nlohmann::json byte_fallback_vocab() {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<unk>"] = 0;
  for (unsigned b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 1 + b;
  }
  return vocab;
}

}  // namespace pstar::text::testing
