// Small tokenizers and a chat template for the record tests (records_test.cpp,
// records_file_test.cpp): byte-level BPE over every byte plus a few whole words, special tokens
// <s>, </s>, <|start|>, <|end|>, and a ChatML-like template that trims contents.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/formats/record_file.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/records.h"
#include "pstar/text/tokenizer.h"

namespace pstar::text::testing {

// GPT-2's byte-level alphabet from its definition: printable bytes stand for themselves, the
// others for U+0100 + n in byte order.
inline std::string byte_char(unsigned byte) {
  auto printable = [](unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  };
  unsigned cp = byte;
  if (!printable(byte)) {
    unsigned n = 0;
    for (unsigned b = 0; b < byte; ++b) n += printable(b) ? 0 : 1;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
  return s;
}

struct SmallOptions {
  bool nfc = false;
  bool prefix_space = false;   // ByteLevel add_prefix_space: token texts no longer spell the text
  bool post_processor = true;  // a TemplateProcessing that puts <s> first
};

// Ids: bytes 0-255, words 256..., <s> 300, </s> 301, <|start|> 302, <|end|> 303; as the text of
// a tokenizer.json.
inline std::string small_tokenizer_json(const SmallOptions& o = {}) {
  using Json = nlohmann::json;
  Json vocab = Json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::vector<std::string> words = {"Paris", "Ġis",  "Ġthe",      "Ġcapital",
                                          "Hello", "user", "assistant", "system"};
  for (size_t i = 0; i < words.size(); ++i) vocab[words[i]] = 256 + i;
  Json added = Json::array();
  const std::vector<std::string> specials = {"<s>", "</s>", "<|start|>", "<|end|>"};
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back({{"id", 300 + i}, {"content", specials[i]}, {"special", true}});
  Json j = {
      {"added_tokens", added},
      {"normalizer", o.nfc ? Json{{"type", "NFC"}} : Json(nullptr)},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", o.prefix_space}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}, {"ignore_merges", true}}}};
  if (o.post_processor) {
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  }
  return j.dump();
}

inline Tokenizer small_tokenizer(const SmallOptions& o = {}) {
  return Tokenizer::from_json(small_tokenizer_json(o), "small.json");
}

inline const char* small_template_source() {
  return "{{ bos_token }}{% for m in messages %}<|start|>{{ m.role }}\n{{ m.content | trim }}"
         "<|end|>\n{% endfor %}";
}

inline ChatTemplate small_template() {
  return ChatTemplate::parse(small_template_source(), "small template", "<s>", "</s>");
}

// A tokenizer_config.json with the small template and <s>, </s>.
inline std::string small_tokenizer_config() {
  return nlohmann::json{
      {"chat_template", small_template_source()}, {"bos_token", "<s>"}, {"eos_token", "</s>"}}
      .dump();
}

// The text of the tokens that count, and of all tokens, spelled by their token texts.
inline std::string counted_text(const Tokenizer& t, const std::vector<uint32_t>& record) {
  std::string out;
  for (uint32_t token : record)
    if (formats::record_token_counts(token)) out += t.token_text(formats::record_token_id(token));
  return out;
}

inline std::string all_text(const Tokenizer& t, const std::vector<uint32_t>& record) {
  std::string out;
  for (uint32_t token : record) out += t.token_text(formats::record_token_id(token));
  return out;
}

}  // namespace pstar::text::testing
