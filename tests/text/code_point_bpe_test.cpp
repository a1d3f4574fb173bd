// BPE over code points (Note [code-point BPE]) and the Replace normalizer, on small Gemma-shaped
// tokenizers written here, with the ids worked out by hand from Hugging Face's rules: the
// normalizer writes spaces as "▁", a character without an entry becomes its UTF-8 bytes' <0xNN>
// entries (byte_fallback) or unk (fused with fuse_unk), merges apply lowest rank first, leftmost
// among equals, for short words (scan) and long ones (heap) alike, and pieces of any size give the
// whole text's ids. real_tokenizer_test.cpp compares Gemma 3's own file with its JS encoder.
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

const std::string kMark = "\xE2\x96\x81";  // ▁ (U+2581), what Gemma's normalizer writes for " "

// Entries by id: 0 <unk>, 1..256 the bytes <0x00>..<0xFF>, then `entries` from 257 on. Gemma's
// normalizer and pre-tokenizer: Replace(" " -> "▁") and Split(" ", MergedWithPrevious), which
// after the normalizer finds nothing to split.
Json gemma_like(const std::vector<std::string>& entries, const Json& merges, bool byte_fallback,
                bool fuse_unk) {
  Json vocab = testing::byte_fallback_vocab();
  for (size_t i = 0; i < entries.size(); ++i) vocab[entries[i]] = 257 + i;
  return Json{
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMark}}},
      {"pre_tokenizer",
       {{"type", "Split"},
        {"pattern", {{"String", " "}}},
        {"behavior", "MergedWithPrevious"},
        {"invert", false}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", merges},
        {"unk_token", "<unk>"},
        {"fuse_unk", fuse_unk},
        {"byte_fallback", byte_fallback}}}};
}

Tokenizer from(const Json& j) { return Tokenizer::from_json(j.dump(), "gemma-like.json"); }

Ids encode_in_pieces(const Tokenizer& t, const std::string& text, size_t size) {
  StreamEncoder encoder(t);
  Ids out;
  for (size_t pos = 0; pos < text.size(); pos += size) encoder.feed(text.substr(pos, size), out);
  encoder.finish(out);
  return out;
}

// 257 a, 258 b, 259 ▁, 260 ab, 261 ▁ab; merges "a b" (rank 0), "▁ ab" (rank 1).
Tokenizer ab_tokenizer(bool byte_fallback = true, bool fuse_unk = true) {
  return from(gemma_like({"a", "b", kMark, "ab", kMark + "ab"},
                         Json::array({Json::array({"a", "b"}), Json::array({kMark, "ab"})}),
                         byte_fallback, fuse_unk));
}

TEST(CodePointBpe, SpacesBecomeMarksAndCharactersWithoutEntriesFallBackToBytes) {
  const Tokenizer t = ab_tokenizer();
  // "ab▁ab▁é": a b ▁ a b ▁ é -> "a b" twice (rank 0), then "▁ ab" (rank 1); é (U+00E9) has no
  // entry: its bytes C3 A9 are <0xC3> (1 + 0xC3) and <0xA9>.
  EXPECT_EQ(t.encode("ab ab \xC3\xA9"), (Ids{260, 261, 259, 1 + 0xC3, 1 + 0xA9}));
  EXPECT_EQ(t.normalize("ab ab"), "ab" + kMark + "ab");
  // Token texts spell the normalized text (Note [token offsets]): a byte-fallback entry is its
  // byte.
  EXPECT_EQ(t.token_text(1 + 0xC3), "\xC3");
  EXPECT_EQ(t.token_text(261), kMark + "ab");
  std::string spelled;
  for (uint32_t id : t.encode("ab ab \xC3\xA9")) spelled += t.token_text(id);
  EXPECT_EQ(spelled, t.normalize("ab ab \xC3\xA9"));
  // A literal "<0x41>" in the text is characters, not the byte A.
  EXPECT_EQ(t.encode("<0x41>").size(), 6u);
  EXPECT_NE(t.description().find("BPE over code points with byte fallback"), std::string::npos)
      << t.description();
}

TEST(CodePointBpe, WithoutByteFallbackUnknownCharactersAreUnkFusedOrNot) {
  // "xé y": x and é have no entry: one <unk> for both with fuse_unk, two without; the space
  // becomes ▁ (259), y is unk again.
  EXPECT_EQ(ab_tokenizer(false, true).encode("x\xC3\xA9 y"), (Ids{0, 259, 0}));
  EXPECT_EQ(ab_tokenizer(false, false).encode("x\xC3\xA9 y"), (Ids{0, 0, 259, 0}));
  // With byte_fallback the bytes win over unk.
  EXPECT_EQ(ab_tokenizer(true, true).encode("x"), (Ids{1 + 'x'}));
  // Neither an entry, nor byte_fallback, nor unk: an error naming the character.
  Json j = gemma_like({"a"}, Json::array(), false, false);
  j["model"]["unk_token"] = nullptr;
  try {
    from(j).encode("a\xE2\x82\xAC");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("the character U+20AC has no token"), std::string::npos)
        << e.what();
  }
}

TEST(CodePointBpe, LongWordsMergeInTheSameOrderAsShortOnes) {
  // Merges "a a" (rank 0) then "aa aa" (rank 1): a run of a's pairs up from the left, then the
  // pairs pair up from the left. 7 a's (scanned): aaaa aa a. 70 a's (past Bpe::kHeapMergeFrom,
  // merged through the heap): 35 aa, then 17 aaaa and one aa left over.
  const Tokenizer t = from(
      gemma_like({"a", "aa", "aaaa"},
                 Json::array({Json::array({"a", "a"}), Json::array({"aa", "aa"})}), true, true));
  EXPECT_EQ(t.encode(std::string(7, 'a')), (Ids{259, 258, 257}));
  Ids expected(17, 259);
  expected.push_back(258);
  EXPECT_EQ(t.encode(std::string(70, 'a')), expected);
  // A lower rank further right goes first: "b c" (rank 0) before "a b" (rank 1) in "abc", so
  // "abc" is a|bc, 3 times and 30 times.
  const Tokenizer u =
      from(gemma_like({"a", "b", "c", "bc", "ab"},
                      Json::array({Json::array({"b", "c"}), Json::array({"a", "b"})}), true, true));
  std::string text;
  Ids abc;
  for (int i = 0; i < 30; ++i) {
    text += "abc";
    abc.insert(abc.end(), {257, 260});
  }
  EXPECT_EQ(u.encode("abcabcabc"), (Ids{257, 260, 257, 260, 257, 260}));
  EXPECT_EQ(u.encode(text), abc);
}

TEST(CodePointBpe, ReplaceOfALongerStringHoldsBackAcrossPieces) {
  // A Replace of "ab" by "X", then NFC: every piece size gives the whole text's ids, also when a
  // piece ends between the a and the b.
  Json j = gemma_like({"X", "a", "b", "c"}, Json::array(), true, true);
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "X"}},
                       {{"type", "NFC"}}}}};
  const Tokenizer t = from(j);
  const std::string text = "aab abab cab e\xCC\x81 aaabbb";
  const Ids whole = t.encode(text);
  EXPECT_EQ(t.normalize("aabc"), "aXc");
  // "aab" is a, X (the spaces stay spaces here, split off by the Split).
  EXPECT_EQ(Ids(whole.begin(), whole.begin() + 2), (Ids{258, 257}));
  for (size_t size = 1; size <= 5; ++size) EXPECT_EQ(encode_in_pieces(t, text, size), whole);
}

}  // namespace
}  // namespace pstar::text
