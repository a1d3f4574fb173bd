// tokenize_files: documents, separators, begin/end tokens, and errors before anything is given.
#include "pstar/text/documents.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::text {
namespace {

using Ids = std::vector<uint32_t>;

// Bytes a, b, c, Ġ as 0-3, "<|endoftext|>" as 4 (special: both begin and end token).
Tokenizer small_tokenizer() {
  return Tokenizer::from_json(R"({
    "added_tokens": [{"id": 4, "content": "<|endoftext|>", "special": true}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3}, "merges": []}})",
                              "small.json");
}

struct Collected {
  Ids ids;
  int calls = 0;
};

TokenizeProgress run(const Tokenizer& t, const std::vector<std::string>& inputs,
                     const DocumentOptions& options, Collected& c) {
  return tokenize_files(t, inputs, options, [&](const Ids& ids) {
    c.ids.insert(c.ids.end(), ids.begin(), ids.end());
    ++c.calls;
  });
}

class Documents : public ::testing::Test {
 protected:
  void SetUp() override {
    pstar::testing::write_text(dir_.file("1.txt"), "ab");
    pstar::testing::write_text(dir_.file("empty.txt"), "");
    pstar::testing::write_text(dir_.file("2.txt"), "accbcc");
    files_ = {dir_.file("1.txt"), dir_.file("empty.txt"), dir_.file("2.txt")};
  }
  pstar::testing::ScratchDir dir_;
  std::vector<std::string> files_;
  Tokenizer tokenizer_ = small_tokenizer();
};

TEST_F(Documents, EachFileIsOneDocumentAndEmptyOnesGiveNothing) {
  DocumentOptions options;
  options.bos = options.eos = true;
  Collected c;
  const TokenizeProgress totals = run(tokenizer_, files_, options, c);
  EXPECT_EQ(c.ids, (Ids{4, 0, 1, 4, 4, 0, 2, 2, 1, 2, 2, 4}));
  EXPECT_EQ(totals.documents, 2u);
  EXPECT_EQ(totals.tokens, c.ids.size());
  EXPECT_EQ(totals.bytes_done, 8u);
  EXPECT_EQ(totals.bytes_total, 8u);
}

TEST_F(Documents, SeparatorSplitsAFileAndPiecesDoNotMatter) {
  DocumentOptions options;
  options.eos = true;
  options.doc_sep = "cc";
  for (const size_t piece : {size_t{1}, size_t{3}, size_t{1} << 20}) {
    options.piece_bytes = piece;
    Collected c;
    const TokenizeProgress totals = run(tokenizer_, files_, options, c);
    // "ab" | "a" "cc" "b" "cc" "" (the empty last document gives nothing).
    EXPECT_EQ(c.ids, (Ids{0, 1, 4, 0, 4, 1, 4})) << "pieces of " << piece;
    EXPECT_EQ(totals.documents, 3u);
    EXPECT_EQ(totals.bytes_done, 8u);
  }
}

TEST_F(Documents, ErrorsComeBeforeAnyId) {
  Collected c;
  files_.push_back(dir_.file("missing.txt"));
  EXPECT_THROW(run(tokenizer_, files_, {}, c), IoError);
  EXPECT_EQ(c.calls, 0);

  pstar::testing::write_text(dir_.file("bad.txt"), "ab\xc3(");
  try {
    run(tokenizer_, {dir_.file("bad.txt")}, {}, c);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir_.file("bad.txt")), std::string::npos) << what;
    EXPECT_NE(what.find("not valid UTF-8 at byte 2"), std::string::npos) << what;
  }

  const Tokenizer no_specials = Tokenizer::from_json(
      R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"vocab": {"a": 0}, "merges": []}})",
      "plain.json");
  DocumentOptions options;
  options.eos = true;
  EXPECT_THROW(run(no_specials, {dir_.file("1.txt")}, options, c), ConfigError);
}

}  // namespace
}  // namespace pstar::text
