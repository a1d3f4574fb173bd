// Detokenization (Note [decoding]) on a small Gemma-shaped tokenizer written here, with the texts
// worked out by hand from Hugging Face's decoders: Replace, ByteFallback (a run of <0xNN> tokens
// that is not valid UTF-8 becomes one U+FFFD a token), Fuse, Strip; special tokens shown or
// skipped; streaming that holds back what a later id can change; decoders pstar does not run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/text/tokenizer.h"
#include "text/byte_fallback_vocab.h"

namespace pstar::text {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<uint32_t>;

const std::string kMark = "\xE2\x96\x81";  // ▁
const std::string kBad = "\xEF\xBF\xBD";   // U+FFFD
const std::string kEuro = "\xE2\x82\xAC";  // €, bytes E2 82 AC

// Ids: 0 <unk>, 1 + b the byte b's <0xNN>, 257 "a", 258 "▁b", 259 "<eot>" (special), 260 "▁".
Json tokenizer_json(const Json& decoder) {
  Json vocab = testing::byte_fallback_vocab();
  vocab["a"] = 257;
  vocab[kMark + "b"] = 258;
  vocab[kMark] = 260;
  return Json{
      {"added_tokens", Json::array({Json{{"id", 259},
                                         {"content", "<eot>"},
                                         {"special", true},
                                         {"normalized", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"single_word", false}}})},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMark}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", Json::array()},
        {"unk_token", "<unk>"},
        {"byte_fallback", true}}},
      {"decoder", decoder}};
}

Json gemma_decoder(bool strip) {
  Json steps =
      Json::array({Json{{"type", "Replace"}, {"pattern", {{"String", kMark}}}, {"content", " "}},
                   Json{{"type", "ByteFallback"}}, Json{{"type", "Fuse"}}});
  if (strip) steps.push_back(Json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}});
  return Json{{"type", "Sequence"}, {"decoders", steps}};
}

Tokenizer make(const Json& decoder) {
  return Tokenizer::from_json(tokenizer_json(decoder).dump(), "decode-test.json");
}

uint32_t byte(unsigned b) { return 1 + b; }

TEST(Decode, ReplaceByteFallbackFuseAndStripAsHuggingFaceDoes) {
  const Tokenizer t = make(gemma_decoder(/*strip=*/false));
  EXPECT_EQ(t.decode({257, 258, 259, byte(0xE2), byte(0x82), byte(0xAC), 258}),
            "a b<eot>" + kEuro + " b");
  EXPECT_EQ(t.decode({257, 259, 258}, /*skip_special=*/true), "a b");
  // A run of bytes that is not UTF-8: one U+FFFD per token of the run (Rust's ByteFallback),
  // even where a part of it would be valid on its own.
  EXPECT_EQ(t.decode({257, byte(0xE2), byte(0x82), byte(0xAC), byte(0x80), 257}),
            "a" + kBad + kBad + kBad + kBad + "a");
  EXPECT_EQ(t.decode({byte(0x41), byte(0x42)}), "AB");
  // Ids past the tokenizer's are left out, as Hugging Face's id_to_token drops them.
  EXPECT_EQ(t.decode({257, 100000, 257}), "aa");
  // Strip after Fuse: one space off the text's start and end.
  const Tokenizer stripped = make(gemma_decoder(/*strip=*/true));
  EXPECT_EQ(stripped.decode({258, 260, 258, 260}), "b  b");
}

// Feeds `ids` one at a time: the pieces, then what finish() gives.
std::vector<std::string> stream(const Tokenizer& t, const Ids& ids) {
  StreamDecoder decoder(t);
  std::vector<std::string> pieces;
  for (const uint32_t id : ids) pieces.push_back(decoder.feed(id));
  pieces.push_back(decoder.finish());
  return pieces;
}

TEST(Decode, StreamingHoldsBackWhatALaterIdCanChange) {
  const Tokenizer t = make(gemma_decoder(/*strip=*/true));
  // A byte run waits for the token after it: "€" is not given out before 0x80 turns the run into
  // four U+FFFD.
  const Ids bad = {258, byte(0xE2), byte(0x82), byte(0xAC), byte(0x80), 257};
  EXPECT_EQ(stream(t, bad),
            (std::vector<std::string>{"b", "", "", "", "", kBad + kBad + kBad + kBad + "a", ""}));
  const Ids good = {258, byte(0xE2), byte(0x82), byte(0xAC), 258};
  EXPECT_EQ(stream(t, good), (std::vector<std::string>{"b", "", "", "", kEuro + " b", ""}));
  // Strip's spaces at the end wait: they go only at the text's end.
  const Ids spaces = {258, 260, 260, 257, 260};
  const auto pieces = stream(t, spaces);
  EXPECT_EQ(pieces, (std::vector<std::string>{"b", "", "", "  a", "", ""}));
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, t.decode(spaces));
}

TEST(Decode, ByteLevelStreamingWaitsForTheRestOfACharacter) {
  // GPT-2's byte-level alphabet: bytes 0x21..0x7E stand for themselves, 0xA1..0xAC and 0xAE..0xFF
  // too; "â" (U+00E2) is byte E2, "Ĥ" (U+0124) is 0x82 (the 36th byte outside the printable
  // ranges: 256 + 36), "¬" (U+00AC) is AC.
  const Json j = {
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"\xC3\xA2", 0}, {"\xC4\xA4", 1}, {"\xC2\xAC", 2}, {"x", 3}}},
        {"merges", Json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  const Tokenizer t = Tokenizer::from_json(j.dump(), "byte-level.json");
  EXPECT_EQ(t.decode({3, 0, 1, 2, 3}), "x" + kEuro + "x");
  EXPECT_EQ(stream(t, {3, 0, 1, 2, 3}), (std::vector<std::string>{"x", "", "", kEuro, "x", ""}));
  // Cut short for good: each invalid sequence one U+FFFD, given out at the end.
  EXPECT_EQ(t.decode({0, 1, 3}), kBad + "x");
  EXPECT_EQ(stream(t, {3, 0, 1}), (std::vector<std::string>{"x", "", "", kBad}));
}

TEST(Decode, ADecoderPstarDoesNotRunIsAnErrorOnlyWhenDecoding) {
  const Tokenizer t = make(Json{{"type", "Metaspace"}, {"replacement", kMark}});
  EXPECT_EQ(t.encode("a"), Ids{257});  // loading and encoding do not depend on it
  try {
    t.decode({257});
    ADD_FAILURE() << "a Metaspace decoder decoded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("decoder of type \"Metaspace\""), std::string::npos)
        << e.what();
  }
  // Without a decoder, Hugging Face joins the token strings with spaces.
  EXPECT_EQ(make(nullptr).decode({257, 258, byte(0x41)}), "a " + kMark + "b <0x41>");
}

}  // namespace
}  // namespace pstar::text
