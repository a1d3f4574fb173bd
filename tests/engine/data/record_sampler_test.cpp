// Record sampling and packing (Note [record sampling], Note [packed batches]) on record files
// written here with known tokens and loss bits: the windows' invariants, each row checked token
// by token against the records, determinism across ranks and histories, epochs, and the counted
// targets against a count over the batches themselves.
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/data/record_sampler.h"
#include "pstar/data/record_source.h"
#include "pstar/formats/record_file.h"
#include "test_util.h"

namespace pstar::data {
namespace {

using formats::record_token;

// Record r has size sizes[r]; its token k has id 1000·(r+1) + k, and counts when (r + k) % 3 != 0,
// so that every token of every row says where it came from.
uint32_t token_of(int64_t r, int64_t k) {
  return record_token(static_cast<uint32_t>(1000 * (r + 1) + k), (r + k) % 3 != 0);
}

std::unique_ptr<RecordSource> records(const pstar::testing::ScratchDir& dir,
                                      const std::vector<int64_t>& sizes) {
  const std::string path = dir.file("r.records");
  formats::RecordFileWriter writer(path);
  for (size_t r = 0; r < sizes.size(); ++r) {
    std::vector<uint32_t> tokens;
    for (int64_t k = 0; k < sizes[r]; ++k) tokens.push_back(token_of(static_cast<int64_t>(r), k));
    writer.add(tokens, static_cast<int64_t>(r) + 1);
  }
  writer.commit("");
  auto file = std::make_shared<const formats::RecordFile>(path);
  return std::make_unique<RecordSource>(file, 0, file->records(), "test records");
}

// Row j of `batch` must be exactly `pieces` laid out as Note [record sampling] says.
void expect_row(const Batch& batch, int64_t j, const std::vector<RecordPiece>& pieces, int64_t S) {
  ASSERT_TRUE(batch.packed());
  auto in = batch.inputs[j], target = batch.targets[j];
  auto position = batch.positions[j], segment = batch.segments[j];
  int64_t at = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    for (int64_t k = 0; k + 1 < pieces[p].tokens; ++k, ++at) {
      ASSERT_LT(at, S);
      const uint32_t next = token_of(pieces[p].record, k + 1);
      EXPECT_EQ(in[at].item<int64_t>(), formats::record_token_id(token_of(pieces[p].record, k)));
      EXPECT_EQ(target[at].item<int64_t>(),
                formats::record_token_counts(next) ? formats::record_token_id(next) : kIgnoreIndex);
      EXPECT_EQ(position[at].item<int64_t>(), k);
      EXPECT_EQ(segment[at].item<int64_t>(), static_cast<int64_t>(p));
    }
  }
  for (int64_t k = 0; at < S; ++at, ++k) {  // padding: its own segment, positions from 0
    EXPECT_EQ(in[at].item<int64_t>(), 0);
    EXPECT_EQ(target[at].item<int64_t>(), kIgnoreIndex);
    EXPECT_EQ(position[at].item<int64_t>(), k);
    EXPECT_EQ(segment[at].item<int64_t>(), static_cast<int64_t>(pieces.size()));
  }
}

int64_t pairs(const std::vector<RecordPiece>& w) {
  int64_t n = 0;
  for (const auto& p : w) n += p.tokens - 1;
  return n;
}

// Sizes with short and long records, one of exactly S + 1 and one longer (truncated), and
// 1-token records (never sampled).
const int64_t S = 16;
const std::vector<int64_t> kSizes = {5, 9, 1, 17, 3, 30, 8, 8, 2, 6, 12, 4, 1, 7, 10, 5, 3, 9};

TEST(RecordSamplerTest, PackedWindowsHoldEachRecordOnceAndAreGreedy) {
  pstar::testing::ScratchDir dir;
  const auto source = records(dir, kSizes);
  for (Sampling sampling : {Sampling::kSequential, Sampling::kRandom}) {
    RecordSampler sampler(*source, sampling, /*packing=*/true, 2, S, 1, 7);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      int64_t first = 0;
      for (int64_t e = 0; e < epoch; ++e) first += sampler.windows_in_epoch(e);
      const int64_t windows = sampler.windows_in_epoch(epoch);
      std::multiset<int64_t> seen;
      for (int64_t w = 0; w < windows; ++w) {
        const auto pieces = sampler.window(first + w);
        ASSERT_FALSE(pieces.empty());
        EXPECT_LE(pairs(pieces), S);
        for (const auto& p : pieces) {
          seen.insert(p.record);
          EXPECT_EQ(p.tokens, std::min<int64_t>(kSizes[p.record], S + 1));  // whole, or cut
        }
        // Greedy: the next window's first record would not have fitted in this one.
        if (w + 1 < windows) {
          EXPECT_GT(pairs(pieces) + sampler.window(first + w + 1).front().tokens - 1, S);
        }
      }
      // Every record of two tokens or more exactly once; the 1-token ones never.
      std::multiset<int64_t> usable;
      for (size_t r = 0; r < kSizes.size(); ++r)
        if (kSizes[r] >= 2) usable.insert(static_cast<int64_t>(r));
      EXPECT_EQ(seen, usable) << "epoch " << epoch;
    }
  }
}

TEST(RecordSamplerTest, RowsAreTheRecordsLaidOutWithPositionsSegmentsAndIgnoredTargets) {
  pstar::testing::ScratchDir dir;
  const auto source = records(dir, kSizes);
  const int64_t B = 3, A = 2;
  for (bool packing : {true, false}) {
    RecordSampler sampler(*source, Sampling::kRandom, packing, B, S, A, 11);
    bool exactly_full = false, several = false;
    for (int64_t step = 1; step <= 4; ++step) {
      for (int64_t m = 1; m <= A; ++m) {
        const Batch batch = sampler.batch(step, m);
        ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{B, S}));
        for (int64_t j = 0; j < B; ++j) {
          const int64_t k = ((step - 1) * A + (m - 1)) * B + j;
          const auto pieces = sampler.window(k);
          if (!packing) {
            EXPECT_EQ(pieces.size(), 1u);
          }
          exactly_full = exactly_full || pairs(pieces) == S;
          several = several || pieces.size() >= 3;
          expect_row(batch, j, pieces, S);
        }
      }
    }
    EXPECT_TRUE(exactly_full);  // the 17-token record alone, at least
    if (packing) {
      EXPECT_TRUE(several);
    }
  }
}

TEST(RecordSamplerTest, RanksSeeWhatOneRankSeesWhateverTheHistory) {
  pstar::testing::ScratchDir dir;
  const auto source = records(dir, kSizes);
  const int64_t R = 2, B = 2, A = 3;
  for (Sampling sampling : {Sampling::kSequential, Sampling::kRandom}) {
    RecordSampler whole(*source, sampling, true, R * B, S, A, 5);
    for (int64_t step : {9, 1, 4}) {  // out of order: no state between batches
      for (int64_t m = 1; m <= A; ++m) {
        const Batch one = whole.batch(step, m);
        for (int64_t r = 0; r < R; ++r) {
          RecordSampler rank(*source, sampling, true, B, S, A, 5, r, R);
          const Batch part = rank.batch(step, m);
          for (const auto& [a, b] :
               {std::pair{part.inputs, one.inputs}, std::pair{part.targets, one.targets},
                std::pair{part.positions, one.positions}, std::pair{part.segments, one.segments}})
            EXPECT_TRUE(torch::equal(a, b.slice(0, r * B, (r + 1) * B)));
          EXPECT_EQ(rank.global_counted_targets(step), whole.global_counted_targets(step));
        }
      }
    }
  }
}

TEST(RecordSamplerTest, EpochsReshuffleBySeedAndSequentialKeepsFileOrder) {
  pstar::testing::ScratchDir dir;
  std::vector<int64_t> sizes(40, 3);  // 40 records of 2 pairs: 8 a window
  const auto source = records(dir, sizes);
  auto order = [&](const RecordSampler& s, int64_t epoch) {
    std::vector<int64_t> out;
    for (int64_t w = 0; w < 5; ++w)
      for (const auto& p : s.window(epoch * 5 + w)) out.push_back(p.record);
    return out;
  };
  RecordSampler random(*source, Sampling::kRandom, true, 1, S, 1, 3);
  RecordSampler again(*source, Sampling::kRandom, true, 1, S, 1, 3);
  RecordSampler other_seed(*source, Sampling::kRandom, true, 1, S, 1, 4);
  RecordSampler sequential(*source, Sampling::kSequential, true, 1, S, 1, 3);
  std::vector<int64_t> file_order(40);
  std::iota(file_order.begin(), file_order.end(), 0);
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(random.windows_in_epoch(e), 5);
    auto o = order(random, e);
    EXPECT_EQ(o, order(again, e));
    EXPECT_NE(o, file_order);
    EXPECT_NE(o, order(other_seed, e));
    EXPECT_EQ(order(sequential, e), file_order);
    std::sort(o.begin(), o.end());
    EXPECT_EQ(o, file_order);  // a permutation
  }
  EXPECT_NE(order(random, 0), order(random, 1));
}

TEST(RecordSamplerTest, GlobalCountedTargetsCountTheBatchesTargets) {
  pstar::testing::ScratchDir dir;
  const auto source = records(dir, kSizes);
  const int64_t R = 2, B = 2, A = 2;
  for (bool packing : {true, false}) {
    std::vector<std::unique_ptr<RecordSampler>> ranks;
    for (int64_t r = 0; r < R; ++r)
      ranks.push_back(
          std::make_unique<RecordSampler>(*source, Sampling::kRandom, packing, B, S, A, 9, r, R));
    for (int64_t step = 1; step <= 5; ++step) {
      int64_t counted = 0;
      for (const auto& rank : ranks)
        for (int64_t m = 1; m <= A; ++m)
          counted += rank->batch(step, m).targets.ne(kIgnoreIndex).sum().item<int64_t>();
      EXPECT_GT(counted, 0);
      for (const auto& rank : ranks) EXPECT_EQ(rank->global_counted_targets(step), counted);
    }
  }
}

TEST(RecordEvalWindowsTest, SpreadEvenlySplitOverRanksAndCounted) {
  pstar::testing::ScratchDir dir;
  const auto source = records(dir, kSizes);
  RecordSampler plan(*source, Sampling::kSequential, true, 1, S, 1, 0);
  const int64_t W = plan.windows_in_epoch(0);
  RecordEvalWindows one(*source, true, S, /*micro_batch=*/2, /*batches=*/2);
  const int64_t N = std::min<int64_t>(W, 4);
  ASSERT_EQ(one.windows(), N);
  std::vector<int64_t> all;
  int64_t counted = 0;
  for (int64_t b = 0; b < one.batches_per_rank(); ++b) {
    const auto indices = one.window_indices(b);
    const Batch batch = one.batch(b);
    ASSERT_EQ(batch.inputs.size(0), static_cast<int64_t>(indices.size()));
    for (size_t j = 0; j < indices.size(); ++j)
      expect_row(batch, static_cast<int64_t>(j), plan.window(indices[j]), S);
    all.insert(all.end(), indices.begin(), indices.end());
    counted += batch.targets.ne(kIgnoreIndex).sum().item<int64_t>();
  }
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < N; ++i) expected.push_back(i * W / N);
  EXPECT_EQ(all, expected);
  EXPECT_EQ(one.counted_targets(), counted);
  // Two ranks read the same windows between them, the same number of micro-batches each.
  std::vector<int64_t> split;
  for (int64_t r = 0; r < 2; ++r) {
    RecordEvalWindows rank(*source, true, S, 2, 2, r, 2);
    EXPECT_EQ(rank.counted_targets(), counted);
    for (int64_t b = 0; b < rank.batches_per_rank(); ++b) {
      const auto indices = rank.window_indices(b);
      split.insert(split.end(), indices.begin(), indices.end());
    }
  }
  std::sort(split.begin(), split.end());
  EXPECT_EQ(split, expected);
  expect_row(one.filler(), 0, plan.window(0), S);
}

}  // namespace
}  // namespace pstar::data
