// Held-out data: data.eval_fraction's two parts, data.eval's second source, and the windows an
// evaluation reads (Note [evaluation windows]).
#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/data/batch_sampler.h"
#include "pstar/data/eval_windows.h"
#include "pstar/data/token_source.h"
#include "pstar/formats/config.h"
#include "pstar/formats/token_file.h"
#include "test_util.h"

namespace pstar::data {
namespace {

// A token file whose token at index i is i (mod 65536): every window tells where it starts.
config::DataConfig counting_file(const pstar::testing::ScratchDir& dir, int64_t n,
                                 const std::string& name = "tokens.bin") {
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<uint32_t>(i % 65536);
  config::DataConfig data;
  data.path = dir.file(name);
  formats::write_token_file(data.path, formats::TokenDType::kU16, tokens);
  return data;
}

TEST(HeldOutTest, FractionHoldsOutTheLastTokensAndTrainingNeverReachesThem) {
  pstar::testing::ScratchDir dir;
  const int64_t N = 1000, S = 8;
  config::DataConfig data = counting_file(dir, N);
  data.eval_fraction = 0.1;
  DataSources sources = open_data_sources(data, 70000, S);
  ASSERT_NE(sources.eval, nullptr);
  EXPECT_EQ(sources.train->size(), 900);
  EXPECT_EQ(sources.eval->size(), 100);
  int64_t first = -1;
  sources.eval->read(0, 1, &first);
  EXPECT_EQ(first, 900);
  EXPECT_NE(sources.eval->describe().find("held out by data.eval_fraction"), std::string::npos);
  // Every window either sampler draws lies wholly in tokens [0, 900).
  for (Sampling sampling : {Sampling::kRandom, Sampling::kSequential}) {
    BatchSampler sampler(*sources.train, sampling, 4, S, 1, 7);
    for (int64_t step = 1; step <= 300; ++step) {
      Batch batch = sampler.batch(step, 1);
      EXPECT_LE(batch.targets.max().item<int64_t>(), 899);
      for (int64_t start : sampler.offsets(step, 1)) EXPECT_LE(start + S, 899);
    }
  }
  // Without data.eval_fraction the training source is the whole file, as before.
  data.eval_fraction.reset();
  DataSources whole = open_data_sources(data, 70000, S);
  EXPECT_EQ(whole.eval, nullptr);
  EXPECT_EQ(whole.train->size(), N);
  EXPECT_EQ(whole.train->describe(), open_token_source(data, 70000, S)->describe());
}

TEST(HeldOutTest, PartsShorterThanOneWindowAreRefusedWithTheKeyAndValue) {
  pstar::testing::ScratchDir dir;
  config::DataConfig data = counting_file(dir, 100);
  data.eval_fraction = 0.05;  // 5 tokens held out, 9 needed
  std::string message =
      pstar::testing::message_of<ConfigError>([&] { (void)open_data_sources(data, 70000, 8); });
  EXPECT_NE(message.find("data.eval_fraction 0.05"), std::string::npos) << message;
  EXPECT_NE(message.find("holds out 5 and leaves 95"), std::string::npos) << message;
  EXPECT_NE(message.find("raise data.eval_fraction"), std::string::npos) << message;
  data.eval_fraction = 0.95;
  message =
      pstar::testing::message_of<ConfigError>([&] { (void)open_data_sources(data, 70000, 8); });
  EXPECT_NE(message.find("lower data.eval_fraction"), std::string::npos) << message;
  // A second source shorter than one window names data.eval.path.
  data.eval_fraction.reset();
  data.eval.path = counting_file(dir, 5, "short.bin").path;
  message =
      pstar::testing::message_of<ConfigError>([&] { (void)open_data_sources(data, 70000, 8); });
  EXPECT_NE(message.find("data.eval.path " + data.eval.path + " has 5 tokens"), std::string::npos)
      << message;
}

TEST(HeldOutTest, SecondSourceIsReadLikeTheTrainingOne) {
  pstar::testing::ScratchDir dir;
  config::DataConfig data = counting_file(dir, 500);
  data.eval.path = counting_file(dir, 300, "eval.bin").path;
  data.eval.dtype = "uint16";
  DataSources sources = open_data_sources(data, 70000, 8);
  EXPECT_EQ(sources.train->size(), 500);
  ASSERT_NE(sources.eval, nullptr);
  EXPECT_EQ(sources.eval->size(), 300);
  EXPECT_EQ(sources.eval->describe(), "data.eval.path " + data.eval.path);
  // Its ids are checked against the vocabulary like the training source's.
  data.path = counting_file(dir, 300, "small.bin").path;
  data.eval.path = counting_file(dir, 500, "large.bin").path;
  const std::string message =
      pstar::testing::message_of<ConfigError>([&] { (void)open_data_sources(data, 400, 8); });
  EXPECT_NE(message.find("data.eval.path " + data.eval.path + ": token id 400 at index 400"),
            std::string::npos)
      << message;
  config::DataConfig text;
  text.text = dir.file("train.txt");
  pstar::testing::write_text(text.text, std::string(100, 'a'));
  text.eval.text = dir.file("eval.txt");
  pstar::testing::write_text(text.eval.text, std::string(50, 'b'));
  sources = open_data_sources(text, 256, 8);
  EXPECT_EQ(sources.eval->size(), 50);
  EXPECT_EQ(sources.eval->describe(), "data.eval.text " + text.eval.text);
}

// Note [evaluation windows]: N = min(batches × B, W) windows spread evenly, fixed whatever the
// world size; the ranks' shares are disjoint, cover them all, and run as many batches each.
TEST(EvalWindowsTest, SpreadEvenlyAndSplitOverRanks) {
  pstar::testing::ScratchDir dir;
  const int64_t S = 8;
  auto source = open_token_source(counting_file(dir, 1001), 70000, S);  // W = 125
  EvalWindows one(*source, S, /*micro_batch=*/3, /*batches=*/4);
  ASSERT_EQ(one.windows(), 12);
  ASSERT_EQ(one.batches_per_rank(), 4);
  std::vector<int64_t> all;
  for (int64_t b = 0; b < one.batches_per_rank(); ++b) {
    const auto starts = one.offsets(b);
    EXPECT_EQ(starts.size(), 3u);
    all.insert(all.end(), starts.begin(), starts.end());
    Batch batch = one.batch(b);
    for (size_t j = 0; j < starts.size(); ++j) {
      // The window's tokens are its offsets: inputs start at the offset, targets one later.
      EXPECT_EQ(batch.inputs[static_cast<int64_t>(j)][0].item<int64_t>(), starts[j]);
      EXPECT_EQ(batch.targets[static_cast<int64_t>(j)][S - 1].item<int64_t>(), starts[j] + S);
    }
  }
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], (i * 125 / 12) * S);
  EXPECT_LE(all.back() + S, 1000);

  for (int64_t world : {2, 3, 5}) {
    std::multiset<int64_t> seen;
    for (int64_t rank = 0; rank < world; ++rank) {
      EvalWindows share(*source, S, 3, 4, rank, world);
      EXPECT_EQ(share.windows(), 12);
      EXPECT_EQ(share.batches_per_rank(), (((12 + world - 1) / world) + 2) / 3);
      for (int64_t b = 0; b < share.batches_per_rank(); ++b)
        for (int64_t start : share.offsets(b)) seen.insert(start);
    }
    EXPECT_EQ(std::vector<int64_t>(seen.begin(), seen.end()), all) << world << " ranks";
  }
  // 5 ranks of micro-batch 1 over 12 windows: 3 batches each; ranks 2 to 4 get an empty third.
  EvalWindows last(*source, S, 1, 12, 4, 5);
  EXPECT_EQ(last.batches_per_rank(), 3);
  EXPECT_TRUE(last.offsets(2).empty());
  EXPECT_EQ(last.batch(2).inputs.size(0), 0);
  EXPECT_EQ(last.filler().inputs.size(0), 1);
}

TEST(EvalWindowsTest, NeverMoreThanTheSourceHolds) {
  pstar::testing::ScratchDir dir;
  auto source = open_token_source(counting_file(dir, 41), 70000, 8);  // W = 5
  EvalWindows windows(*source, 8, 4, 8);
  EXPECT_EQ(windows.windows(), 5);
  EXPECT_EQ(windows.batches_per_rank(), 2);
  EXPECT_EQ(windows.offsets(0), (std::vector<int64_t>{0, 8, 16, 24}));
  EXPECT_EQ(windows.offsets(1), (std::vector<int64_t>{32}));
}

}  // namespace
}  // namespace pstar::data
