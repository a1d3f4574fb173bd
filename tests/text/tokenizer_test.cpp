// pstar_text on small tokenizers written for the purpose: added tokens, merges, ignore_merges,
// NFC, split behaviours, pieces, and the errors for malformed or unsupported files.
#include "pstar/text/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar_test_paths.h"
#include "text/record_fixtures.h"

namespace pstar::text {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<uint32_t>;

const std::string kSmall = PSTAR_SOURCE_DIR "/tests/data/tokenizer/small/";

using testing::byte_char;  // GPT-2's byte-level alphabet (record_fixtures.h)

// A text in the byte-level alphabet (a vocabulary key).
std::string byte_key(const std::string& raw) {
  std::string key;
  for (const char c : raw) key += byte_char(static_cast<unsigned char>(c));
  return key;
}

// A tokenizer.json whose vocabulary has every byte (id = the byte's value) and `extra` entries
// from id 256 on, given in raw bytes.
Json byte_tokenizer(const std::vector<std::string>& extra, const Json& pre_tokenizer,
                    bool ignore_merges = false, const Json& merges = Json::array()) {
  Json vocab = Json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[byte_key(extra[i])] = 256 + i;
  return Json{
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}}};
}

Json byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

// Split (a regex, or with `literal` a plain string) and then ByteLevel without a regex, so that
// the pieces reach BPE as Split made them.
Json split_then_bytes(const std::string& pattern, const std::string& behavior, bool invert,
                      bool literal = false) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{literal ? "String" : "Regex", pattern}}},
             {"behavior", behavior},
             {"invert", invert}},
            byte_level(false, false)}}};
}

Tokenizer from(const Json& j) { return Tokenizer::from_json(j.dump(), "test.json"); }

// The pieces ids stand for, joined by '|'.
std::string pieces(const Tokenizer& t, const Ids& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "|" : "") + t.token_text(ids[i]);
  return out;
}

// The ids of `text` fed in pieces of `size` bytes.
Ids encode_in_pieces(const Tokenizer& t, const std::string& text, size_t size) {
  StreamEncoder encoder(t);
  Ids out;
  for (size_t pos = 0; pos < text.size(); pos += size) encoder.feed(text.substr(pos, size), out);
  encoder.finish(out);
  return out;
}

// encode() and every piece size from 1 to 9 bytes give the same ids.
void expect_piece_independent(const Tokenizer& t, const std::string& text) {
  const Ids whole = t.encode(text);
  for (size_t size = 1; size <= 9; ++size) {
    EXPECT_EQ(encode_in_pieces(t, text, size), whole) << "pieces of " << size << " bytes";
  }
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no FormatError)";
}

TEST(Tokenizer, AddedTokensMatchLeftmostLongestBeforeNormalizedOnes) {
  const Tokenizer t = Tokenizer::load(kSmall + "added_tokens.json");
  EXPECT_EQ(t.vocab_size(), 13);
  // Raw pass: "ab" | <s>x (8, longer than <s>) | " a" | <s> (7) | "abc"; then the normalized
  // token "bc" (9) inside "abc"; then BPE: "ab" -> 4 (a b), " a" -> 5 (Ġ a), "a" -> 0.
  const std::string text = "ab<s>x a<s>abc";
  EXPECT_EQ(t.encode(text), (Ids{4, 8, 5, 7, 0, 9}));
  expect_piece_independent(t, text);
  // "<s" at the end is no token: its bytes.
  EXPECT_EQ(t.encode("a<s"), (Ids{0, 10, 11}));
  EXPECT_EQ(t.token_id("<s>"), 7u);
  EXPECT_EQ(t.bos_id(), 7u);  // <s> is special; no </s>, so no eos
  EXPECT_FALSE(t.eos_id().has_value());
}

TEST(Tokenizer, EmptyMergesLeaveBytesAndIgnoreMergesTakesWholeWords) {
  const Tokenizer t = Tokenizer::load(kSmall + "empty_merges.json");
  // add_prefix_space: " ab ab"; no merges, so every byte is a token although "Ġab" is an entry.
  EXPECT_EQ(t.encode("ab ab"), (Ids{3, 0, 1, 3, 0, 1}));
  Json j = Json::parse(R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġab": 5},
                "merges": [], "ignore_merges": true}})");
  const Tokenizer ignoring = from(j);
  // ignore_merges: a pre-token that is an entry is that entry; " abc" is none, so bytes.
  EXPECT_EQ(ignoring.encode("ab abc"), (Ids{5, 3, 0, 1, 2}));
}

TEST(Tokenizer, MergesApplyLowestRankFirst) {
  // Ranks: "b c" (0) before "a b" (1): "abc" -> a + bc, not ab + c.
  const Json j = byte_tokenizer({"ab", "bc", "abc"}, byte_level(false, true), false,
                                Json::array({"b c", "a b", "a bc"}));
  const Tokenizer t = from(j);
  EXPECT_EQ(pieces(t, t.encode("abc")), "abc");
  EXPECT_EQ(pieces(t, t.encode("ab")), "ab");
  EXPECT_EQ(pieces(t, t.encode("abab")), "ab|ab");
  // Without "a bc", "abc" stops at a|bc.
  const Tokenizer t2 = from(byte_tokenizer({"ab", "bc", "abc"}, byte_level(false, true), false,
                                           Json::array({"b c", "a b"})));
  EXPECT_EQ(pieces(t2, t2.encode("abc")), "a|bc");
  // Merges as pairs give the same.
  const Tokenizer t3 = from(byte_tokenizer({"ab", "bc", "abc"}, byte_level(false, true), false,
                                           Json::parse(R"([["b", "c"], ["a", "b"]])")));
  EXPECT_EQ(pieces(t3, t3.encode("abc")), "a|bc");
}

TEST(Tokenizer, SplitBehaviours) {
  const std::vector<std::string> extra = {"a-", "b-", "-b", "-c", "--"};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Removed", "a|b|c"},
      {"Isolated", "a|-|b|-|-|c"},
      {"MergedWithPrevious", "a-|b-|-|c"},
      {"MergedWithNext", "a|-b|-|-c"},
      {"Contiguous", "a|-|b|--|c"},
  };
  for (const auto& [behavior, expected] : cases) {
    const Json pre = split_then_bytes("-", behavior, false, true);
    // ignore_merges with no merges: a piece is one id when it is an entry, else its bytes.
    const Tokenizer t = from(byte_tokenizer(extra, pre, true));
    EXPECT_EQ(pieces(t, t.encode("a-b--c")), expected) << behavior;
    expect_piece_independent(t, "a-b--c-xa--b-");
  }
  // invert: the pattern names what to keep apart; Removed then drops what it did not match.
  const Json inverted = split_then_bytes("[a-z]", "Removed", true);
  const Tokenizer t = from(byte_tokenizer(extra, inverted, true));
  EXPECT_EQ(pieces(t, t.encode("a-b--c")), "a|b|c");
}

TEST(Tokenizer, EveryBehaviourAndPatternIsPieceIndependentOnRandomText) {
  // Random text over an alphabet the patterns tell apart (letters, digits, spaces, newlines,
  // punctuation, an apostrophe, two- and four-byte characters), from a fixed seed.
  const std::vector<std::string> alphabet = {
      "a",    "b", "Z",  "1",  "7",  " ",  "  ",       "\n",
      "\r\n", ".", "!?", "'s", "'t", "\t", "\xc3\xa9", "\xf0\x9f\x98\x80"};
  uint64_t state = 42;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(state >> 33);
  };
  std::string text;
  while (text.size() < 600) text += alphabet[next() % alphabet.size()];
  // Merges of every pair of these ASCII characters: two bytes of one piece become one id, two of
  // different pieces stay two, so the ids show where the pieces were cut.
  const std::string ascii = "abZ17 \n\r.!?'st\t";
  std::vector<std::string> pairs;
  Json merges = Json::array();
  for (const char x : ascii) {
    for (const char y : ascii) {
      pairs.push_back(std::string{x, y});
      merges.push_back(byte_key(std::string{x}) + " " + byte_key(std::string{y}));
    }
  }
  for (const char* pattern : {"\\s+(?!\\S)|\\s+", "\\p{N}{1,3}", "[.!?]+[\\r\\n]*", "(?i:'s|'t)",
                              "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"}) {
    for (const char* behavior :
         {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
      for (const bool invert : {false, true}) {
        SCOPED_TRACE(std::string(pattern) + " " + behavior + (invert ? " inverted" : ""));
        const Tokenizer t =
            from(byte_tokenizer(pairs, split_then_bytes(pattern, behavior, invert), false, merges));
        expect_piece_independent(t, text);
      }
    }
  }
}

TEST(Tokenizer, ByteLevelPrefixSpaceAndRegex) {
  const Tokenizer t = from(byte_tokenizer({" hello", "hello"}, byte_level(true, true), true));
  // The prefix space joins the first word; the regex splits "  x" into " " and " x".
  EXPECT_EQ(pieces(t, t.encode("hello hello")), " hello| hello");
  EXPECT_EQ(pieces(t, t.encode(" hello")), " hello");
  const Tokenizer no_prefix =
      from(byte_tokenizer({" hello", "hello", "it", "'s"}, byte_level(false, true), true));
  EXPECT_EQ(pieces(no_prefix, no_prefix.encode("hello  hello")), "hello| | hello");
  EXPECT_EQ(pieces(no_prefix, no_prefix.encode("it's")), "it|'s");
  expect_piece_independent(no_prefix, "hello  hello\n\n  it's 12345  \t x");
}

TEST(Tokenizer, RegexLookbehindAndStartAnchorAcrossPieces) {
  // (?<=a)b needs the byte before a cut; ^a matches at the start of the text only.
  for (const char* pattern : {"(?<=a)b", "^a", "\\bab", "(?<=^a)a", "(?<=^aa)b"}) {
    const Json pre = split_then_bytes(pattern, "Isolated", false);
    const Tokenizer t = from(byte_tokenizer({"ab", "aa", "ba", "aab"}, pre, true));
    expect_piece_independent(t, "aabab ab aaab abba ab");
  }
  const Json start = split_then_bytes("^a", "Isolated", false);
  const Tokenizer t = from(byte_tokenizer({"aa"}, start, true));
  EXPECT_EQ(pieces(t, t.encode("aaa")), "a|aa");
  EXPECT_EQ(pieces(t, encode_in_pieces(t, "aaa", 1)), "a|aa");
}

TEST(Tokenizer, NfcComposesAcrossPieces) {
  Json j = byte_tokenizer({}, byte_level(false, true));
  j["normalizer"] = {{"type", "NFC"}};
  const Tokenizer t = from(j);
  // e + U+0301 -> U+00E9 (c3 a9); A + U+030A -> U+00C5 (c3 85).
  EXPECT_EQ(t.encode("e\xcc\x81"), (Ids{0xc3, 0xa9}));
  EXPECT_EQ(t.encode("A\xcc\x8a"), (Ids{0xc3, 0x85}));
  expect_piece_independent(t,
                           "caf"
                           "e\xcc\x81 ma\xcc\x8a\xcc\x8a x\xcc\x81 \xe1\x84\x80\xe1\x85\xa1 end");
  j["normalizer"] = nullptr;
  EXPECT_EQ(from(j).encode("e\xcc\x81"), (Ids{'e', 0xcc, 0x81}));
}

TEST(Tokenizer, InvalidUtf8NamesTheOffset) {
  const Tokenizer t = from(byte_tokenizer({}, byte_level(false, true)));
  EXPECT_NE(error_of([&] { t.encode("abc\xff"); }).find("not valid UTF-8 at byte 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { encode_in_pieces(t, "abcd\xc3", 2); }).find("ends inside a character"),
            std::string::npos);
  // A character cut by a piece boundary is fine.
  EXPECT_EQ(encode_in_pieces(t, "\xc3\xa9", 1), (Ids{0xc3, 0xa9}));
}

TEST(Tokenizer, ByteWithoutTokenNeedsUnk) {
  const Tokenizer t = Tokenizer::load(kSmall + "added_tokens.json");
  EXPECT_NE(error_of([&] { t.encode("z"); }).find("byte 0x7a has no token"), std::string::npos);
}

TEST(Tokenizer, MalformedAndUnsupportedFilesNameTheComponent) {
  auto load_error = [](const std::string& file) {
    return error_of([&] { Tokenizer::load(kSmall + file); });
  };
  EXPECT_NE(load_error("missing_vocab.json").find("model has no \"vocab\""), std::string::npos);
  EXPECT_NE(
      load_error("unsupported_normalizer.json")
          .find("normalizer.normalizers[1] has type 'Lowercase', which pstar does not support"),
      std::string::npos);
  EXPECT_NE(load_error("unsupported_pre_tokenizer.json")
                .find("pre_tokenizer.pretokenizers[0] has type 'Digits'"),
            std::string::npos);
  EXPECT_NE(load_error("unsupported_model.json").find("model has type 'WordPiece'"),
            std::string::npos);

  auto json_error = [](const std::string& text) {
    return error_of([&] { Tokenizer::from_json(text, "t.json"); });
  };
  EXPECT_NE(json_error("{\"model\": ").find("t.json is not valid JSON"), std::string::npos);
  Json j = byte_tokenizer({}, byte_level(false, true));
  j["model"]["merges"] = Json::array({"a zz"});
  EXPECT_NE(json_error(j.dump()).find("model.merges[0] ('a' 'zz') uses 'zz'"), std::string::npos);
  j["model"]["merges"] = Json::array({"a b c"});
  EXPECT_NE(json_error(j.dump()).find("not two tokens separated by one space"), std::string::npos);
  j = byte_tokenizer({}, byte_level(false, true));
  j["added_tokens"] = Json::array({{{"id", 3}, {"content", "<m>"}, {"lstrip", true}}});
  EXPECT_NE(json_error(j.dump()).find("added_tokens[0] ('<m>') sets lstrip: true"),
            std::string::npos);
  j = byte_tokenizer({},
                     {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}});
  EXPECT_NE(json_error(j.dump()).find("is not a regular expression PCRE2 accepts"),
            std::string::npos);
  j = byte_tokenizer({},
                     {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}});
  EXPECT_NE(json_error(j.dump()).find("behavior 'Sideways' is not one of"), std::string::npos);
  // A Replace of a regex is refused by name (code_point_bpe_test.cpp runs a string's).
  j = byte_tokenizer({}, byte_level(false, true));
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}};
  EXPECT_NE(json_error(j.dump()).find("normalizer.pattern is {\"Regex\":\" +\"}; pstar supports a "
                                      "Replace of a non-empty {\"String\": ...} only"),
            std::string::npos)
      << json_error(j.dump());
  j = byte_tokenizer({}, byte_level(false, true));
  j["added_tokens"] = Json::array({{{"id", 16777216}, {"content", "<huge>"}}});
  EXPECT_NE(json_error(j.dump()).find("added_tokens[0].id must be an id from 0 to 16777215"),
            std::string::npos);
  j = byte_tokenizer({}, byte_level(false, true));
  j["model"]["dropout"] = 0.1;
  EXPECT_NE(json_error(j.dump()).find("model.dropout is 0.1"), std::string::npos);
}

TEST(Tokenizer, LoadNamesWhatIsMissing) {
  try {
    Tokenizer::load(kSmall + "no-such-file.json");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  try {
    Tokenizer::load(PSTAR_SOURCE_DIR "/tests/data/tokenizer/corpus");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("holds neither tokenizer.json nor GPT-2's vocab.json"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pstar::text
