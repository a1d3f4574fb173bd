// Token sources and batch sampling: validation errors, and the exact windows of each sampling mode.
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/data/batch_sampler.h"
#include "pstar/data/token_source.h"
#include "pstar/formats/config.h"
#include "pstar/formats/token_file.h"
#include "test_util.h"

namespace pstar::data {
namespace {

// A token file whose token at index i is i (mod 65536): every window is recognisable.
config::DataConfig counting_file(const pstar::testing::ScratchDir& dir, int64_t n,
                                 const std::string& dtype = "uint16") {
  std::vector<uint32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(i % 65536);
  config::DataConfig data;
  data.path = dir.file("tokens.bin");
  data.dtype = dtype;
  formats::write_token_file(data.path, formats::parse_token_dtype(dtype, "data.dtype"), tokens);
  return data;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  return pstar::testing::message_of<Error>(std::forward<Fn>(fn));
}

TEST(BatchSamplerTest, SequentialTakesExactlyTheDescribedWindows) {
  pstar::testing::ScratchDir dir;
  const int64_t S = 8, B = 3, A = 2, N = 1000;
  auto data = counting_file(dir, N);
  auto source = open_token_source(data, 70000, S);
  BatchSampler sampler(*source, Sampling::kSequential, B, S, A, 42);
  const int64_t windows = (N - 1) / S;  // 124
  for (int64_t s = 1; s <= 30; ++s) {
    for (int64_t m = 1; m <= A; ++m) {
      Batch batch = sampler.batch(s, m);
      ASSERT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{B, S}));
      ASSERT_EQ(batch.targets.sizes().vec(), (std::vector<int64_t>{B, S}));
      for (int64_t j = 1; j <= B; ++j) {
        // The issue's formula, and wrap-around past the last whole window.
        const int64_t k = ((s - 1) * A + (m - 1)) * B + (j - 1);
        const int64_t start = (k % windows) * S;
        if (k < windows) {
          ASSERT_EQ(start, k * S);
        }
        for (int64_t t = 0; t < S; ++t) {
          ASSERT_EQ(batch.inputs[j - 1][t].item<int64_t>(), start + t) << "s" << s << " m" << m;
          ASSERT_EQ(batch.targets[j - 1][t].item<int64_t>(), start + t + 1);
        }
      }
    }
  }
}

// Note [sequential sampling] with ranks: rank r's sample i is global sample r·B + i, so R ranks of
// B read what one rank of R·B reads, in both modes; and the windows follow the formula.
TEST(BatchSamplerTest, RanksSplitTheGlobalBatchOfOneRank) {
  pstar::testing::ScratchDir dir;
  const int64_t S = 8, A = 2, N = 1000, R = 3, B = 2;
  auto data = counting_file(dir, N);
  auto source = open_token_source(data, 70000, S);
  const int64_t windows = (N - 1) / S;
  for (Sampling mode : {Sampling::kSequential, Sampling::kRandom}) {
    BatchSampler whole(*source, mode, R * B, S, A, 7);
    std::vector<BatchSampler> ranks;
    for (int64_t r = 0; r < R; ++r) ranks.emplace_back(*source, mode, B, S, A, 7, r, R);
    for (int64_t s = 1; s <= 5; ++s) {
      for (int64_t m = 1; m <= A; ++m) {
        const auto all = whole.offsets(s, m);
        for (int64_t r = 0; r < R; ++r) {
          const auto mine = ranks[r].offsets(s, m);
          ASSERT_EQ(mine.size(), static_cast<size_t>(B));
          for (int64_t i = 1; i <= B; ++i) {
            const int64_t g = r * B + i;
            EXPECT_EQ(mine[i - 1], all[g - 1]) << "rank " << r << " sample " << i;
            if (mode == Sampling::kSequential) {
              const int64_t k = ((s - 1) * A + (m - 1)) * R * B + (g - 1);
              EXPECT_EQ(mine[i - 1], (k % windows) * S);
            }
          }
        }
      }
    }
  }
}

TEST(BatchSamplerTest, SequentialWrapsToTheStart) {
  pstar::testing::ScratchDir dir;
  // 25 tokens, S = 8: windows start at 0, 8, 16 (16 + 9 = 25 fits), then wrap to 0.
  auto source = open_token_source(counting_file(dir, 25), 100, 8);
  BatchSampler sampler(*source, Sampling::kSequential, 1, 8, 1, 0);
  EXPECT_EQ(sampler.offsets(1, 1), std::vector<int64_t>{0});
  EXPECT_EQ(sampler.offsets(3, 1), std::vector<int64_t>{16});
  EXPECT_EQ(sampler.offsets(4, 1), std::vector<int64_t>{0});
  EXPECT_EQ(sampler.offsets(5, 1), std::vector<int64_t>{8});
}

TEST(BatchSamplerTest, RandomIsSeededInRangeAndIndependentOfHistory) {
  pstar::testing::ScratchDir dir;
  const int64_t N = 500, S = 16;
  auto source = open_token_source(counting_file(dir, N), 1000, S);
  BatchSampler a(*source, Sampling::kRandom, 4, S, 2, 7);
  BatchSampler b(*source, Sampling::kRandom, 4, S, 2, 7);
  BatchSampler c(*source, Sampling::kRandom, 4, S, 2, 8);
  std::set<int64_t> seen;
  int64_t differs = 0;
  for (int64_t s = 1; s <= 200; ++s)
    for (int64_t m = 1; m <= 2; ++m) {
      auto oa = a.offsets(s, m);
      EXPECT_EQ(oa, b.offsets(s, m));
      differs += oa != c.offsets(s, m);
      for (int64_t o : oa) {
        ASSERT_GE(o, 0);
        ASSERT_LE(o + S + 1, N);
        seen.insert(o);
      }
    }
  EXPECT_GT(differs, 390);       // another seed gives other windows
  EXPECT_GT(seen.size(), 400u);  // 1600 draws over 484 starts cover most of them
  EXPECT_TRUE(seen.count(0) || seen.count(1));
  EXPECT_TRUE(seen.count(N - S - 1) || seen.count(N - S - 2));
  // Step 50 alone gives what it gave in sequence.
  BatchSampler fresh(*source, Sampling::kRandom, 4, S, 2, 7);
  EXPECT_EQ(fresh.offsets(50, 2), a.offsets(50, 2));
  auto batch = fresh.batch(50, 2);
  EXPECT_EQ(batch.inputs[0][0].item<int64_t>(), fresh.offsets(50, 2)[0]);
}

TEST(TokenSourceTest, TextIsBytes) {
  pstar::testing::ScratchDir dir;
  pstar::testing::write_text(dir.file("t.txt"), "h\xc3\xa9llo world");
  config::DataConfig data;
  data.text = dir.file("t.txt");
  auto source = open_token_source(data, 256, 4);
  ASSERT_EQ(source->size(), 12);
  std::vector<int64_t> out(3);
  source->read(0, 3, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{'h', 0xc3, 0xa9}));
}

// data.text with data.tokenizer: the tokenizer's ids (hand-computed for this tiny BPE: "ab" merges,
// ByteLevel maps the space to "Ġ"), cached beside the text and read back from the cache the
// second time.
TEST(TokenSourceTest, TextThroughATokenizerIsItsIdsCachedBesideIt) {
  pstar::testing::ScratchDir dir;
  pstar::testing::write_text(dir.file("t.txt"), "ab a ab b");
  pstar::testing::write_text(dir.file("tokenizer.json"), R"({
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3}, "merges": ["a b"]}})");
  config::DataConfig data;
  data.text = dir.file("t.txt");
  data.tokenizer = dir.path().string();  // a folder holding tokenizer.json
  const std::vector<int64_t> want = {3, 2, 0, 2, 3, 2, 1};
  for (int run = 0; run < 2; ++run) {
    auto source = open_token_source(data, 4, 2);
    ASSERT_EQ(source->size(), static_cast<int64_t>(want.size())) << "run " << run;
    std::vector<int64_t> out(want.size());
    source->read(0, static_cast<int64_t>(out.size()), out.data());
    EXPECT_EQ(out, want) << "run " << run;
  }
  int caches = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    caches += entry.path().filename().string().rfind("t.txt.pstar-", 0) == 0;
  EXPECT_EQ(caches, 1);
  // The model's vocabulary is checked against the tokenizer's ids, as for a token file.
  const std::string msg = error_of([&] { open_token_source(data, 3, 2); });
  EXPECT_NE(msg.find("token id 3 at index 0"), std::string::npos) << msg;
}

TEST(TokenSourceTest, Uint32Files) {
  pstar::testing::ScratchDir dir;
  config::DataConfig data;
  data.path = dir.file("t32.bin");
  data.dtype = "uint32";
  formats::write_token_file(data.path, formats::TokenDType::kU32, {5, 100000, 7, 1});
  auto source = open_token_source(data, 100001, 2);
  std::vector<int64_t> out(4);
  source->read(0, 4, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{5, 100000, 7, 1}));
}

TEST(TokenSourceTest, TokenIdAtOrAboveVocabIsAClearError) {
  pstar::testing::ScratchDir dir;
  auto data = counting_file(dir, 300);
  const std::string msg = error_of([&] { open_token_source(data, 256, 8); });
  EXPECT_NE(msg.find("token id 256 at index 256"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.vocab_size 256"), std::string::npos) << msg;
  EXPECT_NE(msg.find(data.path), std::string::npos) << msg;
  // Text bytes above a small vocab.
  pstar::testing::write_text(dir.file("t.txt"), "abc\xff");
  config::DataConfig text;
  text.text = dir.file("t.txt");
  EXPECT_NE(error_of([&] { open_token_source(text, 128, 2); }).find("token id 255 at index 3"),
            std::string::npos);
}

TEST(TokenSourceTest, TooShortIsAClearError) {
  pstar::testing::ScratchDir dir;
  auto data = counting_file(dir, 16);
  EXPECT_NO_THROW(open_token_source(data, 100, 15));
  const std::string msg = error_of([&] { open_token_source(data, 100, 16); });
  EXPECT_NE(msg.find("has 16 tokens, fewer than model.seq_len + 1 = 17"), std::string::npos) << msg;
}

TEST(TokenSourceTest, UnreadableFilesAreIoErrors) {
  config::DataConfig data;
  data.path = "/nonexistent/tokens.bin";
  EXPECT_THROW(open_token_source(data, 100, 4), IoError);
  config::DataConfig text;
  text.text = "/nonexistent/corpus.txt";
  try {
    open_token_source(text, 256, 4);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/corpus.txt"), std::string::npos);
  }
  config::DataConfig both;
  both.path = "a";
  both.text = "b";
  EXPECT_THROW(open_token_source(both, 100, 4), ConfigError);
}

TEST(TokenSourceTest, UnknownSamplingIsNamed) {
  EXPECT_NE(error_of([] { parse_sampling("shuffle"); }).find("data.sampling"), std::string::npos);
}

}  // namespace
}  // namespace pstar::data
