// The memory accounting against hand-computed values: chunk layouts, payload bytes, the fit, the
// estimator's search and DeepSpeed's formulas.
#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/plan/estimate.h"
#include "pstar/plan/memory_plan.h"

namespace pstar::plan {
namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;

TEST(PayloadBytesTest, MatchesTheChunkLayoutNote) {
  EXPECT_EQ(payload_bytes(2, false).whole(), 14);  // param/grad reuse (PatrickStar's 14 B)
  EXPECT_EQ(payload_bytes(2, false).compute(), 2);
  EXPECT_EQ(payload_bytes(2, true).whole(), 18);  // separate fp32 gradient
  EXPECT_EQ(payload_bytes(2, true).compute(), 6);
  EXPECT_EQ(payload_bytes(4, false).whole(), 16);  // fp32: the param is the master
  EXPECT_EQ(payload_bytes(4, false).optimizer(), 8);
}

TEST(ChunkLayoutTest, FirstFitInOrder) {
  const std::vector<LeafModule> leaves = {{3}, {5}, {4}, {2}, {7}};
  // size 8: [3,5] [4,2] [7]
  EXPECT_EQ(count_chunks(leaves, 8, false), 3);
  // size 10: [3,5] [4,2] [7]; size 14: [3,5,4,2] [7]
  EXPECT_EQ(count_chunks(leaves, 10, false), 3);
  EXPECT_EQ(count_chunks(leaves, 14, false), 2);
}

TEST(ChunkLayoutTest, HostPinnedEmbeddingsGetChunksOfTheirOwn) {
  const std::vector<LeafModule> leaves = {{3, true}, {2, true}, {1}, {1}};
  EXPECT_EQ(count_chunks(leaves, 8, false), 1);
  EXPECT_EQ(count_chunks(leaves, 8, true), 2);
  // Size 5 (below the model's 7, so not shrunk): [3, 2] pinned, [1, 1].
  const auto layout = plan_layout(leaves, LayoutOptions{5, false, true});
  EXPECT_EQ(layout.choice, ChunkLayout::Choice::kConfigured);
  EXPECT_EQ(layout.num_chunks, 2);
  EXPECT_EQ(layout.host_pinned_chunks, 1);
  EXPECT_EQ(layout.padding_elements(), 2 * 5 - 7);
}

// Note [split modules]: with several ranks a leaf larger than every searched size is split over a
// group of its own, placed first. Hand-worked for 2 ranks, ordinary sizes 64Ki..256Ki: the
// 600000-element leaf gets two parts of ceil(600000 / 2) = 300000 -> 5 * 64Ki, chunks 0 and 1. At
// 64Ki the three small leaves take a chunk each, and the last group, one chunk short, needs an
// empty chunk (its leaf's two parts of 64Ki would be no smaller): 917504 elements. At 128Ki they
// fit one chunk, and the last group, one short, is split instead: two parts of 60000 -> 64Ki,
// 786432 elements in all, the least; larger sizes cost more.
TEST(ChunkLayoutTest, SeveralRanksSplitALargeLeafOverAGroupOfItsOwn) {
  const std::vector<LeafModule> leaves = {{40000}, {30000}, {50000}, {600000}};
  const auto layout = plan_layout(leaves, LayoutOptions{1 << 16, false, false, 2});
  EXPECT_EQ(layout.choice, ChunkLayout::Choice::kMixed);
  EXPECT_EQ(layout.chunk_size, 2 * 65536);
  EXPECT_EQ(layout.sizes, (std::vector<int64_t>{5 * 65536, 5 * 65536, 65536, 65536}));
  EXPECT_EQ(layout.parts, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(layout.split_modules, 1);
  EXPECT_EQ(layout.tail_leaves, 3);
  EXPECT_EQ(layout.oversized_chunks, 2);
  EXPECT_EQ(layout.world_size, 2);
  EXPECT_EQ(layout.padding_elements(), 12 * 65536 - 720000);
  EXPECT_EQ(leaf_chunks(leaves, layout, false), (std::vector<int64_t>{2, 2, 2, 0}));
  // Each rank owns one part of each group: the same share of the leaf.
  EXPECT_EQ(layout.part_of(0), 0);
  EXPECT_EQ(layout.part_of(1), 1);
  // Four ranks: parts of ceil(600000 / 4) = 150000 -> 3 * 64Ki, the small leaves a chunk each at
  // 64Ki with one empty chunk to complete their group (parts of 30000 -> 64Ki would be no
  // smaller); 128Ki ties, and the smaller size wins.
  const auto four = plan_layout(leaves, LayoutOptions{1 << 16, false, false, 4});
  EXPECT_EQ(four.chunk_size, 65536);
  EXPECT_EQ(four.sizes, (std::vector<int64_t>{3 * 65536, 3 * 65536, 3 * 65536, 3 * 65536, 65536,
                                              65536, 65536}));
  EXPECT_EQ(four.parts, (std::vector<int64_t>{0, 1, 2, 3, -1, -1, -1}));
  EXPECT_EQ(four.tail_leaves, 0);
  // Host-pinned chunks stay first: a pinned leaf is split where it is, all its parts pinned, and
  // a pinned ordinary chunk before a split group is completed with an empty chunk.
  const std::vector<LeafModule> pinned_first = {{600000, true}, {30000}, {20000}};
  const auto first = plan_layout(pinned_first, LayoutOptions{1 << 16, false, true, 2});
  EXPECT_EQ(first.parts, (std::vector<int64_t>{0, 1, -1}));
  EXPECT_EQ(first.host_pinned_chunks, 2);
  EXPECT_EQ(leaf_chunks(pinned_first, first, true), (std::vector<int64_t>{0, 2, 2}));
  const std::vector<LeafModule> pinned_then_split = {{30000, true}, {20000}, {600000}};
  const auto then = plan_layout(pinned_then_split, LayoutOptions{1 << 16, false, true, 2});
  EXPECT_EQ(then.parts, (std::vector<int64_t>{-1, -1, 0, 1, -1}));
  EXPECT_EQ(then.host_pinned_chunks, 1);
  EXPECT_EQ(leaf_chunks(pinned_then_split, then, true), (std::vector<int64_t>{0, 4, 2}));
  // No module is split where a searched size holds them all; here 3000 holds the whole model in
  // one chunk, and its one group is split over the two ranks: parts of 1500 -> 2000 on the grid
  // of 1000, 1000 elements of padding against 3000 for the chunk and an empty one.
  const auto avoided = plan_layout({{300}, {2500}, {200}}, LayoutOptions{1000, false, false, 2});
  EXPECT_EQ(avoided.split_modules, 0);
  EXPECT_EQ(avoided.tail_leaves, 3);
  EXPECT_EQ(avoided.chunk_size, 3000);
  EXPECT_EQ(avoided.sizes, (std::vector<int64_t>{2000, 2000}));
}

// Note [split modules]: ordinary chunks of several ranks leave the last group short; its leaves
// are split over the ranks instead of empty chunks completing it, where the parts are smaller than
// a chunk. 300 leaves of 10000 elements in chunks of 2^17 (13 each): 24 chunks. On 7 ranks the
// last 3 chunks hold 27 leaves (270000 elements) and would need 4 empty ones; instead 7 parts of
// ceil(270000 / 7) = 38572 -> 64Ki.
TEST(ChunkLayoutTest, TheLastGroupIsSplitRatherThanCompletedWithEmptyChunks) {
  const std::vector<LeafModule> leaves(300, LeafModule{10000});
  const auto one = plan_layout(leaves, LayoutOptions{1 << 17, false, false, 1});
  EXPECT_EQ(one.num_chunks, 24);
  EXPECT_EQ(one.tail_leaves, 0);
  const auto seven = plan_layout(leaves, LayoutOptions{1 << 17, false, false, 7});
  EXPECT_EQ(seven.choice, ChunkLayout::Choice::kConfigured);
  EXPECT_EQ(seven.chunk_size, 1 << 17);
  ASSERT_EQ(seven.num_chunks, 28);
  EXPECT_EQ(seven.tail_leaves, 27);
  for (int64_t k = 0; k < 21; ++k) EXPECT_EQ(seven.size_of(k), 1 << 17) << k;
  for (int64_t k = 21; k < 28; ++k) {
    EXPECT_EQ(seven.size_of(k), 65536) << k;
    EXPECT_EQ(seven.part_of(k), k - 21) << k;
  }
  EXPECT_EQ(seven.padding_elements(), 21 * 131072 + 7 * 65536 - 3000000);
  const std::vector<int64_t> chunk_of = leaf_chunks(leaves, seven, false);
  EXPECT_EQ(chunk_of[272], 20);
  EXPECT_EQ(chunk_of[273], 21);
  EXPECT_EQ(chunk_of[299], 21);
  // On 5 ranks the last 4 chunks' 40 leaves would take parts of 80000 -> 128Ki, no smaller than
  // a chunk: one empty chunk completes the group.
  EXPECT_EQ(plan_layout(leaves, LayoutOptions{1 << 17, false, false, 5}).tail_leaves, 0);
  // Nor on a grid as coarse as the chunk (below 64Ki elements the grid is the chunk size).
  const auto coarse = plan_layout(leaves, LayoutOptions{30000, false, false, 7});
  EXPECT_EQ(coarse.tail_leaves, 0);
  EXPECT_TRUE(coarse.parts.empty());
}

// The pieces of a split module's tensors, hand-worked: parts of 10 elements, a tensor of 15 at 8.
TEST(ChunkLayoutTest, PiecesOfATensorAcrossParts) {
  const PieceRange p0 = piece_in_part(8, 15, 0, 10);
  EXPECT_EQ(p0.begin, 0);
  EXPECT_EQ(p0.end, 2);
  EXPECT_EQ(p0.chunk_offset, 8);
  const PieceRange p1 = piece_in_part(8, 15, 1, 10);
  EXPECT_EQ(p1.begin, 2);
  EXPECT_EQ(p1.end, 12);
  EXPECT_EQ(p1.chunk_offset, 0);
  const PieceRange p2 = piece_in_part(8, 15, 2, 10);
  EXPECT_EQ(p2.begin, 12);
  EXPECT_EQ(p2.end, 15);
  EXPECT_EQ(p2.chunk_offset, 0);
  EXPECT_TRUE(piece_in_part(8, 15, 3, 10).empty());
  EXPECT_TRUE(piece_in_part(25, 3, 0, 10).empty());
  EXPECT_EQ(p0.numel() + p1.numel() + p2.numel(), 15);
}

// Note [chunk sizes]: with one rank the large leaf gets a chunk of its own, and the ordinary size
// is searched among 128Ki..512Ki for the rest, the large leaf too big for all of them. Hand-worked:
// 128Ki needs [100000] [75000] and the large leaf's 640Ki = 896Ki; 192Ki needs [175000] + 640Ki =
// 832Ki; every larger size needs more.
TEST(ChunkLayoutTest, OneRankGivesALargeLeafAChunkOfItsOwn) {
  const std::vector<LeafModule> leaves = {{100000}, {70000}, {5000}, {600000}};
  const auto layout = plan_layout(leaves, LayoutOptions{1 << 17, false, false, 1});
  EXPECT_EQ(layout.choice, ChunkLayout::Choice::kMixed);
  EXPECT_EQ(layout.chunk_size, 3 * 65536);
  EXPECT_EQ(layout.sizes, (std::vector<int64_t>{3 * 65536, 10 * 65536}));
  EXPECT_EQ(layout.oversized_chunks, 1);
  EXPECT_EQ(layout.largest_chunk(), 10 * 65536);
  EXPECT_EQ(layout.padding_elements(), 13 * 65536 - 775000);
  EXPECT_EQ(leaf_chunks(leaves, layout, false), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(layout.searched_lo, 2 * 65536);
  EXPECT_EQ(layout.searched_hi, 8 * 65536);
  // Below the 64Ki grid (small test models) the grid is the configured size; the leaf after an
  // oversized one starts a chunk of its own. 1000: [300] [6000] [200] = 8000 beats 2000's 10000.
  const auto small = plan_layout({{300}, {5500}, {200}}, LayoutOptions{1000, false, false, 1});
  EXPECT_EQ(small.chunk_size, 1000);
  EXPECT_EQ(small.sizes, (std::vector<int64_t>{1000, 6000, 1000}));
  // A larger ordinary size that avoids the oversized chunk comes first (such chunks keep their
  // optimizer state in memory): 3000 holds all three.
  const auto avoided = plan_layout({{300}, {2500}, {200}}, LayoutOptions{1000, false, false, 1});
  EXPECT_EQ(avoided.chunk_size, 3000);
  EXPECT_EQ(avoided.oversized_chunks, 0);
  EXPECT_EQ(avoided.num_chunks, 1);
  // A host-pinned oversized embedding is still pinned, in its own chunk.
  const auto pinned =
      plan_layout({{5500, true}, {300}, {200}}, LayoutOptions{1000, false, true, 1});
  EXPECT_EQ(pinned.sizes, (std::vector<int64_t>{6000, 1000}));
  EXPECT_EQ(pinned.host_pinned_chunks, 1);
}

TEST(ChunkLayoutTest, GptLeavesCountTheModelExactly) {
  model::GptConfig shape;
  shape.hidden = 64;
  shape.layers = 3;
  shape.heads = 4;
  shape.vocab_size = 256;
  shape.seq_len = 32;
  const auto leaves = gpt_leaf_modules(shape);
  int64_t total = 0;
  for (const auto& l : leaves) total += l.numel;
  EXPECT_EQ(total, shape.num_params());
  EXPECT_TRUE(leaves[0].embedding && leaves[1].embedding && !leaves[2].embedding);
}

TEST(ChunkLayoutTest, LeafChunksFollowTheSameFirstFit) {
  const std::vector<LeafModule> leaves = {{3, true}, {2, true}, {1}, {4}, {2}, {7}};
  // Size 8, pinned embeddings: [3, 2] [1, 4, 2] [7].
  EXPECT_EQ(leaf_chunks(leaves, 8, true), (std::vector<int64_t>{0, 0, 1, 1, 1, 2}));
  EXPECT_EQ(count_chunks(leaves, 8, true), 3);
  // Not pinned: [3, 2, 1] [4, 2] [7].
  EXPECT_EQ(leaf_chunks(leaves, 8, false), (std::vector<int64_t>{0, 0, 0, 1, 1, 2}));
}

TEST(ChunkLayoutTest, ModelChunkMapPlacesEveryParameterByItsLeaf) {
  config::TrainConfig config;
  config.model.preset = "gpt-tiny";  // hidden 64, 2 layers, vocab 256, seq 64
  config.default_chunk_size = 20000;
  config.use_cpu_embedding = config::OnOffAuto::kOn;
  const ModelChunkMap map = model_chunk_map(config, 1);
  EXPECT_EQ(map.layout.chunk_size, 20000);
  ASSERT_EQ(map.params.size(), map.chunks.size());
  ASSERT_EQ(map.params.size(), 2u + 2 * 12 + 2);
  // wte (16384) alone (pinned embeddings), wpe (4096) next, then blocks by first fit.
  EXPECT_EQ(map.params[0].name, "transformer.wte.weight");
  EXPECT_EQ(map.chunks[0], 0);
  EXPECT_EQ(map.params[1].name, "transformer.wpe.weight");
  EXPECT_EQ(map.chunks[1], 1);
  EXPECT_EQ(map.params[2].name, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(map.chunks[2], 2);
  EXPECT_EQ(map.chunks.back(), map.layout.num_chunks - 1);
  for (size_t i = 1; i < map.chunks.size(); ++i) EXPECT_GE(map.chunks[i], map.chunks[i - 1]);
  // A weight and its bias share their leaf's chunk.
  for (size_t i = 0; i + 1 < map.params.size(); ++i) {
    if (map.params[i].leaf == map.params[i + 1].leaf) {
      EXPECT_EQ(map.chunks[i], map.chunks[i + 1]);
    }
  }
}

FitInput small_fit(int64_t chunks, int64_t device_budget, int64_t host_budget) {
  FitInput in;
  in.layout.chunk_size = 1000;
  in.layout.num_chunks = chunks;
  in.layout.params = chunks * 1000 - 10;
  in.payload = payload_bytes(2, false);  // 14 B: 14000 B per chunk, 2000 B compute
  in.device_budget = device_budget;
  in.host_budget = host_budget;
  return in;
}

TEST(FitTest, HostFirstThenTheDeviceKeepsTheRest) {
  // Host holds floor(50000 / 14000) = 3 chunks; 7 - 3 = 4 go to the device: 56000 B, plus a
  // working set of 2 * 2000 B and 5000 B non-model = 65000 <= 0.9 * 80000.
  FitInput in = small_fit(7, 80000, 50000);
  in.non_model = 5000;
  Fit f = check_fit(in);
  EXPECT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.host_chunks, 3);
  EXPECT_EQ(f.device_chunks, 4);
  EXPECT_EQ(f.device_used, 4 * 14000 + 4000 + 5000);
  EXPECT_EQ(f.device_limit, 72000);
  EXPECT_EQ(f.host_used, 3 * 14000);
  EXPECT_EQ(f.owned.padding_bytes, 10 * 14);
  // One more chunk needs 79000 > 72000.
  in.layout.num_chunks = 8;
  f = check_fit(in);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.reason.find("model data"), std::string::npos) << f.reason;
}

TEST(FitTest, NonModelMemoryAloneCanExceedTheDevice) {
  FitInput in = small_fit(1, 80000, 1 << 20);
  in.non_model = 77000;  // + 4000 working > 80000
  const Fit f = check_fit(in);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.reason.find("device tier"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("micro-batch"), std::string::npos) << f.reason;
  // Within the budget but past the fill ratio: fine while no chunk has to stay on the device.
  in.non_model = 70000;
  EXPECT_TRUE(check_fit(in).fits);
  in.host_budget = 0;  // now the one chunk must stay on the device
  EXPECT_FALSE(check_fit(in).fits);
}

TEST(FitTest, RanksShareChunksAndTheHost) {
  // 16 chunks over 4 ranks, 2 ranks per host: 4 owned each; host 100000 - 2 * 3000 staging
  // holds floor(94000 / 2 / 14000) = 3 per rank.
  FitInput in = small_fit(16, 1 << 20, 100000);
  in.world_size = 4;
  in.ranks_per_host = 2;
  in.staging_per_rank = 3000;
  const Fit f = check_fit(in);
  EXPECT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.owned_chunks, 4);
  EXPECT_EQ(f.host_chunks, 3);
  EXPECT_EQ(f.device_chunks, 1);
  EXPECT_EQ(f.device_working, 2 * 4 * 2000);  // two gathered groups of 4 chunks
  EXPECT_EQ(f.host_used, 2 * 3 * 14000 + 6000);
}

TEST(FitTest, EmbeddingChunksMustStayOnTheHost) {
  FitInput in = small_fit(4, 1 << 20, 20000);  // host holds 1 chunk
  in.layout.host_pinned_chunks = 2;
  const Fit f = check_fit(in);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.reason.find("use_cpu_embedding"), std::string::npos) << f.reason;
}

// Note [nvme fit], by hand. small_fit's chunks: 14000 B whole, 2000 B compute, 12000 B optimizer.
// The device here has no room for chunks: 4000 B of working set + 68000 B non-model fill its
// 72000 B limit.
TEST(NvmeFitTest, FewestChunksMoveAndTheStagingPoolCountsAgainstTheHost) {
  FitInput in = small_fit(20, 80000, 280000);
  in.non_model = 68000;
  // Without NVMe: the host holds 20 whole chunks only with 280000 B; it has exactly that.
  EXPECT_TRUE(check_fit(in).fits);
  in.host_budget = 279999;
  Fit f = check_fit(in);
  EXPECT_FALSE(f.fits);
  EXPECT_EQ(f.nvme_chunks, 0);
  EXPECT_EQ(f.host_nvme_staging, 0);
  // With NVMe at 279999 B of host: 1 chunk on NVMe needs 19 whole + 1 compute + a pool of 1 =
  // 266000 + 2000 + 12000 = 280000 (one byte short); 2 need a pool of 2 (24000) and leave room
  // for 17 whole; 3 and 4 likewise fall short; 5 (pool of 4: 48000) leave 231999 - 10000 for 15
  // whole: 15 + 5 = 20.
  in.nvme_capacity = int64_t{1} << 30;
  f = check_fit(in);
  EXPECT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.nvme_chunks, 5);
  EXPECT_EQ(f.nvme_host_chunks, 5);
  EXPECT_EQ(f.nvme_device_chunks, 0);
  EXPECT_EQ(f.host_chunks, 15);
  EXPECT_EQ(f.device_chunks, 0);
  EXPECT_EQ(f.host_nvme_staging, kNvmeStagingChunks * 12000);
  EXPECT_EQ(f.host_used, 15 * 14000 + 5 * 2000 + 4 * 12000);
  EXPECT_EQ(f.nvme_used, 5 * 12000);
  // At 280000 B no chunk needs NVMe: the result is the one without it.
  in.host_budget = 280000;
  f = check_fit(in);
  EXPECT_TRUE(f.fits);
  EXPECT_EQ(f.nvme_chunks, 0);
  EXPECT_EQ(f.host_used, 20 * 14000);
  // The pool holds no more slots than chunks on NVMe.
  const PayloadBytes bf16 = payload_bytes(2, false);
  EXPECT_EQ(nvme_staging_per_rank(0, 1000, bf16), 0);
  EXPECT_EQ(nvme_staging_per_rank(1, 1000, bf16), 12000);
  EXPECT_EQ(nvme_staging_per_rank(3, 1000, bf16), 36000);
  EXPECT_EQ(nvme_staging_per_rank(9, 1000, bf16), kNvmeStagingChunks * 12000);
  EXPECT_EQ(nvme_staging_per_rank(9, 1000, payload_bytes(4, false)), kNvmeStagingChunks * 8000);
}

// All chunks on NVMe: the host's 88000 B hold the pool (48000), the buffer through which the
// device's compute payloads are updated (2000) and 19 compute payloads (38000); the device's
// 63000 B of room (72000 - 4000 working - 5000 non-model) hold 31 more (62000).
TEST(NvmeFitTest, ComputePayloadsFillTheHostThenTheDevice) {
  FitInput in = small_fit(50, 80000, 88000);
  in.non_model = 5000;
  in.nvme_capacity = int64_t{1} << 30;
  Fit f = check_fit(in);
  ASSERT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.nvme_chunks, 50);
  EXPECT_EQ(f.nvme_host_chunks, 19);
  EXPECT_EQ(f.nvme_device_chunks, 31);
  EXPECT_EQ(f.host_chunks + f.device_chunks, 0);
  EXPECT_EQ(f.host_nvme_staging, 48000 + 2000);
  EXPECT_EQ(f.host_used, 88000);
  EXPECT_EQ(f.device_used, 31 * 2000 + 4000 + 5000);
  EXPECT_LE(f.device_used, f.device_limit);
  // One chunk more: its compute payload has no room anywhere.
  in.layout.num_chunks = 51;
  f = check_fit(in);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.reason.find("compute payloads"), std::string::npos) << f.reason;
  // One host byte less: 18 compute payloads on the host, 32 do not fit the device.
  in.layout.num_chunks = 50;
  in.host_budget = 87999;
  EXPECT_FALSE(check_fit(in).fits);
  // With 90000 B the host holds the pool and all 21 compute payloads: no buffer is needed.
  in.layout.num_chunks = 21;
  in.host_budget = 48000 + 21 * 2000;
  in.non_model = 72000 - 4000;  // no device room
  f = check_fit(in);
  ASSERT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.nvme_device_chunks, 0);
  EXPECT_EQ(f.host_nvme_staging, 48000);
  in.non_model = 5000;

  // 40 chunks need 39 on NVMe: 19 compute payloads on the host (beside the buffer), 20 on the
  // device beside 1 whole chunk (14000 + 40000 <= 63000); with 38 the device has room for 1 whole
  // chunk only: 39.
  in.host_budget = 88000;
  in.layout.num_chunks = 40;
  f = check_fit(in);
  ASSERT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.nvme_chunks, 39);
  EXPECT_EQ(f.nvme_device_chunks, 20);
  EXPECT_EQ(f.device_chunks, 1);
  EXPECT_EQ(f.device_static, 14000 + 20 * 2000);
  EXPECT_EQ(f.nvme_used, 39 * 12000);
  // The NVMe may fill kNvmeFillRatio of its capacity: 468000 B fit 520000 B, not 519999.
  in.nvme_capacity = 520000;
  f = check_fit(in);
  EXPECT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.nvme_limit, 468000);
  in.nvme_capacity = 519999;
  f = check_fit(in);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.reason.find("NVMe tier"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("507.81 KiB"), std::string::npos) << f.reason;  // the capacity
}

// Ranks of a host share its budget and its disk: the pool is per rank.
TEST(NvmeFitTest, RanksShareTheHostAndTheDisk) {
  // 16 chunks, 8 per rank; each rank's share of the host holds its pool (48000) and 8 compute
  // payloads (16000), and no more: 7 on NVMe would leave 16000 for 7 compute payloads and no
  // whole chunk.
  FitInput in = small_fit(16, 80000, 2 * (4 * 12000 + 8 * 2000));
  in.world_size = 2;
  in.ranks_per_host = 2;
  in.non_model = 72000 - 2 * 2 * 2000;  // no device room
  EXPECT_FALSE(check_fit(in).fits);
  in.nvme_capacity = int64_t{1} << 30;
  Fit f = check_fit(in);
  ASSERT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.owned_chunks, 8);
  EXPECT_EQ(f.nvme_chunks, 8);
  EXPECT_EQ(f.host_nvme_staging, 2 * 4 * 12000);
  EXPECT_EQ(f.host_used, 2 * (4 * 12000 + 8 * 2000));
  EXPECT_EQ(f.nvme_used, 2 * 8 * 12000);
  // The disk is the node's: both ranks' 96000 B must fit 90% of it.
  in.nvme_capacity = 2 * 8 * 12000 * 10 / 9 - 1;
  f = check_fit(in);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.reason.find("NVMe tier"), std::string::npos) << f.reason;
}

// Note [split modules]: a split module's parts keep their optimizer payloads in memory even where
// they have the ordinary size; the same 16 chunks with the first group split need one more
// ordinary chunk's worth of host memory per rank, and its part is never on NVMe.
TEST(NvmeFitTest, SplitModulesPartsStayInMemory) {
  FitInput in = small_fit(16, 80000, 2 * (4 * 12000 + 8 * 2000));
  in.world_size = 2;
  in.ranks_per_host = 2;
  in.non_model = 72000 - 2 * 2 * 2000;
  in.nvme_capacity = int64_t{1} << 30;
  in.layout.parts.assign(16, -1);
  in.layout.parts[0] = 0;
  in.layout.parts[1] = 1;
  Fit f = check_fit(in);
  EXPECT_FALSE(f.fits) << "the part's 12000 B of optimizer state has no room in memory";
  in.host_budget += 2 * 12000;
  f = check_fit(in);
  ASSERT_TRUE(f.fits) << f.reason;
  EXPECT_EQ(f.nvme_chunks, 7);
  ASSERT_EQ(f.owned.homes.size(), 8u);
  EXPECT_EQ(f.owned.homes[0], Fit::Home::kHost);
  for (size_t i = 1; i < 8; ++i) EXPECT_EQ(f.owned.homes[i], Fit::Home::kHostNvme) << i;
}

// A hand count of the activation model for one tiny shape (Note [activation model]):
// B=2, S=4, h=8, a=2, V=16, L=3, bf16.
TEST(ActivationModelTest, HandComputedTinyShape) {
  GptActivationInput in{8, 3, 2, 16, 4, 2, 2, false};
  const int64_t bsh = 2 * 4 * 8, bs = 8, scores = 2 * 2 * 4 * 4, bsv = 2 * 4 * 16;
  const int64_t block = 8 * bsh + 14 * 2 * bsh + 16 * bs + 6 * scores + 16;
  auto a = estimate_gpt_activations(in);
  EXPECT_EQ(a.block_saved, block);
  EXPECT_EQ(a.stored, 3 * block);
  EXPECT_EQ(a.head_peak, 6 * bsh + 8 * bs + 14 * bsv);
  const int64_t mlp = 9 * 2 * bsh + 4 * 64 * 2;
  EXPECT_EQ(a.block_backward, std::max(6 * scores, mlp) + 2 * bsv);
  EXPECT_EQ(a.peak, 3 * block + std::max(a.head_peak, a.block_backward));
  in.checkpointing = true;
  a = estimate_gpt_activations(in);
  EXPECT_EQ(a.stored, 3 * 2 * bsh);
  EXPECT_EQ(a.block_backward, block + std::max(6 * scores, mlp) + 2 * bsv);
}

TEST(ActivationModelTest, CheckpointingSavesMemoryAtScale) {
  GptActivationInput in{4096, 48, 32, 50257, 1024, 4, 2, false};
  const auto off = estimate_gpt_activations(in);
  in.checkpointing = true;
  const auto on = estimate_gpt_activations(in);
  EXPECT_LT(on.peak * 4, off.peak);
  // Korthikanti et al.: ~seq·batch·hidden·(34 + 5·heads·seq/hidden) bytes per layer without
  // recomputation; pstar keeps fp32 LayerNorm inputs and softmax outputs, so it is a bit above.
  const double korthikanti = 1024.0 * 4 * 4096 * (34 + 5.0 * 32 * 1024 / 4096);
  EXPECT_GT(static_cast<double>(off.block_saved), korthikanti);
  EXPECT_LT(static_cast<double>(off.block_saved), 1.25 * korthikanti);
}

Hardware preset_hardware(const char* name, int64_t gpus, int64_t cpu_memory) {
  const GpuPreset* p = find_gpu_preset(name);
  EXPECT_NE(p, nullptr) << name;
  Hardware hw;
  hw.name = p->name;
  hw.gpu_memory = p->memory;
  hw.cpu_memory = cpu_memory;
  hw.gpus_per_node = gpus;
  hw.tflops_16 = p->tflops_16;
  hw.tflops_32 = p->tflops_32;
  hw.pcie_gbps = p->pcie_gbps;
  hw.link_gbps = p->link_gbps;
  hw.cpu_mem_gbps = p->cpu_mem_gbps;
  return hw;
}

TEST(EstimateTest, PresetsAreFoundWhateverTheCase) {
  EXPECT_NE(find_gpu_preset("a100-80gb"), nullptr);
  EXPECT_NE(find_gpu_preset("RTX 4090-24GB"), nullptr);
  EXPECT_EQ(find_gpu_preset("A100"), nullptr);
}

// PatrickStar's published maxima (../shared/reference/patrickstar.md), seq 1024, checkpointing.
TEST(EstimateTest, ReachesPatrickStarsPublishedScale) {
  const Workload w;  // seq 1024, checkpointing on, bf16, micro-batch 4
  const auto v100 = estimate_largest(preset_hardware("V100-32GB", 8, 240 * kGB), w, {}, {});
  EXPECT_GE(v100.best.params, 18 * kGB);
  EXPECT_TRUE(v100.best.fit.fits);
  const auto a100 = estimate_largest(preset_hardware("A100-80GB", 8, 1000 * kGB), w, {}, {});
  EXPECT_GE(a100.best.params, 68 * kGB);
  EXPECT_TRUE(a100.best.fit.fits);
}

TEST(EstimateTest, LayerSearchStopsAtTheLastFit) {
  const Hardware hw = preset_hardware("H100-80GB", 1, 128 * kGB);
  const Workload w;
  const int64_t layers = max_layers(hw, w, 8192, 64);
  ASSERT_GT(layers, 0);
  EXPECT_TRUE(evaluate(hw, w, 8192, layers, 64).fit.fits);
  EXPECT_FALSE(evaluate(hw, w, 8192, layers + 1, 64).fit.fits);
  // Model data is the limit: 128 GB of host at 80% plus the GPU's share, at 14 B per parameter.
  const auto e = evaluate(hw, w, 8192, layers, 64);
  EXPECT_LT(static_cast<double>(e.params) * 14, 0.8 * 128e9 + 0.72 * hw.gpu_memory);
}

TEST(EstimateTest, StepTimeAddsItsParts) {
  const Hardware hw = preset_hardware("A100-80GB", 8, 1000 * kGB);
  const Workload w;
  const auto e = evaluate(hw, w, 4096, 50, 32);
  // FLOPs: 8 · P · tokens with recomputation (PatrickStar's count).
  EXPECT_DOUBLE_EQ(e.time.flops_per_gpu, 8.0 * static_cast<double>(e.params) * 4 * 1024);
  EXPECT_DOUBLE_EQ(e.time.compute_s, e.time.flops_per_gpu / (312e12 * 0.5));
  // Note [communication time]: (N − 1)/N of the model gathered twice in bf16 and reduced once in
  // fp32 over NVLink (300 GB/s on an A100, the preset), beside compute.
  EXPECT_NEAR(e.time.comm_s, 7.0 / 8.0 * static_cast<double>(e.params) * (2 * 2 + 4) / 300e9,
              1e-9 * e.time.comm_s);
  EXPECT_NEAR(e.time.step_s(),
              e.time.compute_s + e.time.transfer_s + e.time.host_adam_s +
                  std::max(0.0, e.time.comm_s - e.time.compute_s),
              1e-12);
  EXPECT_LT(e.time.tflops_per_gpu(), 312 * 0.5);
}

// Note [communication time]: only what outlasts compute is paid; a slow network across nodes
// makes the collectives the longer part of the step, and then the step pays the difference.
TEST(EstimateTest, CommunicationBesideComputeCountsWhatOutlastsIt) {
  StepTime t;
  t.compute_s = 2.0;
  t.comm_s = 1.5;
  EXPECT_EQ(t.comm_exposed_s(), 0.0);
  EXPECT_EQ(t.step_s(), 2.0);
  t.comm_s = 3.25;
  EXPECT_EQ(t.comm_exposed_s(), 1.25);
  EXPECT_EQ(t.step_s(), 3.25);

  Hardware two_nodes = preset_hardware("A100-80GB", 8, 1000 * kGB);
  two_nodes.nodes = 2;
  two_nodes.net_gbps = 1;  // 1 GB/s shared by 8 GPUs: far slower than compute
  const auto e = evaluate(two_nodes, Workload{}, 4096, 50, 32);
  EXPECT_NEAR(e.time.comm_s, 15.0 / 16.0 * static_cast<double>(e.params) * 8 / (1e9 / 8),
              1e-9 * e.time.comm_s);
  EXPECT_GT(e.time.comm_exposed_s(), 0);
  EXPECT_NEAR(e.time.step_s(), e.time.transfer_s + e.time.host_adam_s + e.time.comm_s,
              1e-9 * e.time.step_s());
}

TEST(EstimateTest, DeepSpeedFormulasHandComputed) {
  const Hardware hw = preset_hardware("A100-80GB", 8, 1000 * kGB);
  const auto ds = deepspeed_estimates(hw, 8192, 50257);
  ASSERT_EQ(ds.size(), 2u);
  // ZeRO-2 offload: min(GPU / 2, CPU / (max(4·8, 16) · 1.5)) = min(42.9e9, 20.8e9).
  EXPECT_EQ(ds[0].max_params, static_cast<int64_t>(1000e9 / 48));
  // ZeRO-3 offload: CPU / (18 · 1.5) per node; 4L = 4 · 50257 · 8192 fits 80 GiB.
  EXPECT_EQ(ds[1].max_params, static_cast<int64_t>(1000e9 / 27));
}

}  // namespace
}  // namespace pstar::plan
