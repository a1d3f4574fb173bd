// ensure_token_cache: a text's tokens written once beside it, found again, and never stale.
#include "pstar/text/token_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "pstar/formats/token_file.h"
#include "test_util.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<uint32_t>;

Tokenizer tokenizer(uint32_t eos_id) {
  return Tokenizer::from_json(R"({"added_tokens": [{"id": )" + std::to_string(eos_id) +
                                  R"(, "content": "</s>", "special": true}],
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
          "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3}, "merges": ["a b"]}})",
                              "cache.json");
}

Ids read_tokens(const TokenCache& cache) {
  const formats::TokenFile file(cache.path, cache.dtype);
  Ids ids;
  for (int64_t i = 0; i < file.size(); ++i) ids.push_back(file.at(i));
  return ids;
}

TEST(TokenCache, WrittenOnceBesideTheTextThenReused) {
  pstar::testing::ScratchDir dir;
  const std::string text = dir.file("corpus.txt");
  pstar::testing::write_text(text, "ab a ab");
  const Tokenizer t = tokenizer(4);
  DocumentOptions options;
  options.eos = true;
  const TokenCache first = ensure_token_cache(t, text, options);
  EXPECT_TRUE(first.created);
  EXPECT_EQ(fs::path(first.path).parent_path(), dir.path());
  EXPECT_EQ(first.path.rfind(text + ".pstar-", 0), 0u) << first.path;
  EXPECT_EQ(first.dtype, formats::TokenDType::kU16);
  EXPECT_EQ(read_tokens(first), (Ids{3, 2, 0, 2, 3, 4}));
  EXPECT_EQ(first.totals.tokens, 6u);

  const auto written = fs::last_write_time(first.path);
  const TokenCache second = ensure_token_cache(t, text, options);
  EXPECT_FALSE(second.created);
  EXPECT_EQ(second.path, first.path);
  EXPECT_EQ(fs::last_write_time(second.path), written);
}

TEST(TokenCache, AnotherTextTokenizerOrOptionIsAnotherFile) {
  pstar::testing::ScratchDir dir;
  const std::string text = dir.file("corpus.txt");
  pstar::testing::write_text(text, "ab a ab");
  const TokenCache base = token_cache_path(tokenizer(4), text);
  DocumentOptions eos;
  eos.eos = true;
  EXPECT_NE(token_cache_path(tokenizer(4), text, eos).path, base.path);
  // A tokenizer with other ids (its vocabulary now needs uint32).
  const TokenCache big = token_cache_path(tokenizer(70000), text);
  EXPECT_NE(big.path, base.path);
  EXPECT_EQ(big.dtype, formats::TokenDType::kU32);
  EXPECT_NE(big.path.find(".uint32.tokens"), std::string::npos) << big.path;
  // An edited text.
  pstar::testing::write_text(text, "ab a ab b");
  const TokenCache edited = ensure_token_cache(tokenizer(4), text);
  EXPECT_NE(edited.path, base.path);
  EXPECT_EQ(read_tokens(edited), (Ids{3, 2, 0, 2, 3, 2, 1}));
}

}  // namespace
}  // namespace pstar::text
