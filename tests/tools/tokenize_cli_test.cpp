// pstar-tokenize end to end: byte mode as before, --tokenizer with documents and dtypes, and the
// errors that leave nothing behind.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar_test_paths.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using pstar::testing::read_bytes;
using pstar::testing::read_text;
using pstar::testing::write_text;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

// Runs pstar-tokenize with `args` (paths here have no spaces or quotes).
Result run_tool(const pstar::testing::ScratchDir& dir, const std::string& args) {
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  const std::string command =
      PSTAR_BINARY_DIR "/tools/pstar-tokenize " + args + " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

std::vector<uint32_t> read_ids(const std::string& path, size_t width) {
  const auto bytes = read_bytes(path);
  std::vector<uint32_t> ids;
  for (size_t i = 0; i + width <= bytes.size(); i += width) {
    uint32_t v = 0;
    for (size_t b = 0; b < width; ++b) v |= uint32_t{bytes[i + b]} << (8 * b);
    ids.push_back(v);
  }
  return ids;
}

// Bytes a, b, c, Ġ as 0-3, <|endoftext|> as 4, and an added token with id `big_id`.
std::string tokenizer_json(uint32_t big_id = 5) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "added_tokens": [{"id": 4, "content": "<|endoftext|>", "special": true}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 6},
              "merges": ["a b"]}})");
  j["added_tokens"].push_back({{"id", big_id}, {"content", "<big>"}, {"special", true}});
  return j.dump();
}

std::string describe(const Result& r) { return "stdout:\n" + r.out + "stderr:\n" + r.err; }

TEST(TokenizeCli, BytesWithoutTokenizerAsBefore) {
  pstar::testing::ScratchDir dir;
  write_text(dir.file("in.txt"), "abca");
  const Result r = run_tool(dir, dir.file("in.txt") + " " + dir.file("out.bin"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(read_ids(dir.file("out.bin"), 2), (std::vector<uint32_t>{'a', 'b', 'c', 'a'}));
  EXPECT_NE(r.out.find("tokens:          4\ndistinct tokens: 3 (vocab 256)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("   97 'a'               2   50.00%"), std::string::npos) << r.out;
  // Byte tokens have no end token.
  const Result eos = run_tool(dir, "--eos " + dir.file("in.txt") + " " + dir.file("o2.bin"));
  EXPECT_EQ(eos.exit_code, 2) << describe(eos);
  EXPECT_NE(eos.err.find("--eos, --bos and --doc-sep need --tokenizer"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.file("o2.bin")));
}

TEST(TokenizeCli, TokenizerDocumentsAndDefaultDtype) {
  pstar::testing::ScratchDir dir;
  fs::create_directories(dir.file("tok"));
  write_text(dir.file("tok/tokenizer.json"), tokenizer_json());
  write_text(dir.file("1.txt"), "ab c");
  write_text(dir.file("2.txt"), "c<|endoftext|>cc##ba");
  const Result r =
      run_tool(dir, "--tokenizer " + dir.file("tok") + " --eos --bos --doc-sep '##' " +
                        dir.file("1.txt") + " " + dir.file("2.txt") + " " + dir.file("out.bin"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  // uint16: the vocabulary (7) fits. Documents: "ab c", "c<|endoftext|>cc", "ba".
  EXPECT_EQ(read_ids(dir.file("out.bin"), 2),
            (std::vector<uint32_t>{4, 6, 3, 2, 4, 4, 2, 4, 2, 2, 4, 4, 1, 0, 4}));
  EXPECT_NE(r.out.find("wrote " + dir.file("out.bin") + " (uint16, 30 bytes)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("distinct tokens: 6 (vocab 7)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'<|endoftext|>'"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("in 3 document(s) -> 15 tokens"), std::string::npos) << r.err;
}

TEST(TokenizeCli, LargeIdsNeedUint32) {
  pstar::testing::ScratchDir dir;
  write_text(dir.file("tokenizer.json"), tokenizer_json(70000));
  write_text(dir.file("in.txt"), "ab<big>");
  const std::string files = dir.file("in.txt") + " " + dir.file("out.bin");
  const Result bad =
      run_tool(dir, "--tokenizer " + dir.file("tokenizer.json") + " --dtype uint16 " + files);
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--dtype uint16 holds ids up to 65535, but the tokenizer"),
            std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(dir.file("out.bin")));
  // By default: uint32.
  const Result r = run_tool(dir, "--tokenizer " + dir.file("tokenizer.json") + " " + files);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(read_ids(dir.file("out.bin"), 4), (std::vector<uint32_t>{6, 70000}));
  EXPECT_NE(r.out.find("(uint32, 8 bytes)"), std::string::npos) << r.out;
}

TEST(TokenizeCli, ErrorsWriteNothing) {
  pstar::testing::ScratchDir dir;
  write_text(dir.file("tokenizer.json"), tokenizer_json());
  write_text(dir.file("in.txt"), "ab");
  write_text(dir.file("out.bin"), "old");
  const std::string tok = "--tokenizer " + dir.file("tokenizer.json") + " ";
  // An unreadable input after a good one: exit 3, the old output untouched.
  const Result missing = run_tool(
      dir, tok + dir.file("in.txt") + " " + dir.file("nope.txt") + " " + dir.file("out.bin"));
  EXPECT_EQ(missing.exit_code, 3) << describe(missing);
  EXPECT_NE(missing.err.find("nope.txt"), std::string::npos) << missing.err;
  EXPECT_EQ(read_text(dir.file("out.bin")), "old");
  // Text that is not UTF-8: exit 4, naming the file and the byte.
  write_text(dir.file("bad.txt"), "ab\xff");
  const Result bad = run_tool(dir, tok + dir.file("bad.txt") + " " + dir.file("out.bin"));
  EXPECT_EQ(bad.exit_code, 4) << describe(bad);
  EXPECT_NE(bad.err.find("bad.txt"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("not valid UTF-8 at byte 2"), std::string::npos) << bad.err;
  EXPECT_EQ(read_text(dir.file("out.bin")), "old");
  // An unsupported tokenizer: exit 4, naming the component and its type.
  write_text(dir.file("t2.json"), R"({"pre_tokenizer": {"type": "Whitespace"},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  const Result unsupported = run_tool(dir, "--tokenizer " + dir.file("t2.json") + " " +
                                               dir.file("in.txt") + " " + dir.file("out.bin"));
  EXPECT_EQ(unsupported.exit_code, 4) << describe(unsupported);
  EXPECT_NE(
      unsupported.err.find("pre_tokenizer has type 'Whitespace', which pstar does not support"),
      std::string::npos)
      << unsupported.err;
  EXPECT_EQ(read_text(dir.file("out.bin")), "old");
  // A tokenizer without an end token asked for one: exit 2.
  write_text(dir.file("t3.json"), R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0, "Ġ": 1}, "merges": []}})");
  const Result no_eos = run_tool(dir, "--eos --tokenizer " + dir.file("t3.json") + " " +
                                          dir.file("in.txt") + " " + dir.file("out.bin"));
  EXPECT_EQ(no_eos.exit_code, 2) << describe(no_eos);
  EXPECT_NE(no_eos.err.find("has no end-of-text token"), std::string::npos) << no_eos.err;
  EXPECT_EQ(read_text(dir.file("out.bin")), "old");
}

TEST(TokenizeCli, Gpt2FolderMatchesTheReference) {
  const char* env = std::getenv("PSTAR_TOKENIZER_DATA");
  const std::string cache = env && *env ? env : PSTAR_SOURCE_DIR "/.cache/tokenizers";
  if (!fs::exists(cache + "/reference/gpt2/prose.txt.json")) {
    GTEST_SKIP() << "no tokenizer test data in " << cache
                 << ": run scripts/fetch-tokenizer-data.sh (scripts/test.sh runs it)";
  }
  pstar::testing::ScratchDir dir;
  const Result r =
      run_tool(dir, "--tokenizer " + cache + "/gpt2 " + PSTAR_SOURCE_DIR +
                        "/tests/data/tokenizer/corpus/prose.txt " + dir.file("out.bin"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto ref = nlohmann::json::parse(read_text(cache + "/reference/gpt2/prose.txt.json"));
  EXPECT_EQ(read_ids(dir.file("out.bin"), 2), ref.at("ids").get<std::vector<uint32_t>>());
}

}  // namespace
