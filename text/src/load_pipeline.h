// Reading a tokenizer.json's normalizer and pre-tokenizer into a TokenizerImpl (private to
// pstar_text; load.cpp reads the model and added tokens and builds the rest), and the JSON
// helpers both use. Every message names the file and the component's path in it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer_impl.h"

namespace pstar::text {

using Json = nlohmann::json;

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
inline constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// object[key]; FormatError "ORIGIN: WHAT has no "KEY"" when absent.
const Json& field(const Json& object, const char* key, const std::string& what,
                  const std::string& origin);
// object[key] as a boolean, `fallback` when absent or null.
bool optional_bool(const Json& object, const char* key, bool fallback, const std::string& what,
                   const std::string& origin);

// Appends the normalizer `n` (null: none; a Sequence: each in order) to impl.normalizers.
void read_normalizer(const Json& n, const std::string& what, const std::string& origin,
                     TokenizerImpl& impl);
// Appends the pre-tokenizer `p` (null: none; a Sequence: each in order) to impl.pre.
void read_pre_tokenizer(const Json& p, const std::string& what, const std::string& origin,
                        TokenizerImpl& impl);
// Reads the decoder `d` (null: none; a Sequence: flattened) into impl.decoder (decode.cpp). A type
// pstar does not run is kept as impl.decoder.unsupported, so the tokenizer still encodes.
void read_decoder(const Json& d, const std::string& origin, TokenizerImpl& impl);
// GPT-2's folder form: the ByteLevel decoder its tokenizer.json would name.
void use_byte_level_decoder(TokenizerImpl& impl);
// Whether `p` or one of a Sequence is ByteLevel: the model is then byte-level BPE (Note
// [code-point BPE] in tokenizer_impl.h).
bool has_byte_level(const Json& p);

}  // namespace pstar::text
