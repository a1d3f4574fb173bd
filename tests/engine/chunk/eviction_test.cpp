// The eviction planner: next-use queries, the chunk budget rule, eviction order, the simulator on
// hand-worked traces, and the simulator against the exhaustive optimum on random small traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/chunk/eviction.h"
#include "pstar/chunk/sharding.h"

namespace pstar::chunk {
namespace {

// The message of the pstar::Error `fn` throws, or "<no error>".
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

AccessTrace trace_of(std::vector<std::vector<int64_t>> accesses) {
  AccessTrace trace;
  trace.non_model_bytes.assign(accesses.size(), 0);
  trace.accesses = std::move(accesses);
  return trace;
}

TEST(AccessTraceTest, ValidateNamesTheProblem) {
  EXPECT_EQ(error_of([] { trace_of({{0, 1}, {}}).validate(2); }), "<no error>");
  EXPECT_NE(error_of([] { trace_of({}).validate(2); }).find("no moments"), std::string::npos);
  EXPECT_NE(error_of([] {
              trace_of({{0}, {2}}).validate(2);
            }).find("moment 1 accesses chunk 2"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              trace_of({{1, 0, 1}}).validate(2);
            }).find("lists chunk 1 more than once"),
            std::string::npos);
  AccessTrace mismatched = trace_of({{0}, {1}});
  mismatched.non_model_bytes.pop_back();
  EXPECT_NE(error_of([&] { mismatched.validate(2); }).find("2 moments of accesses but 1"),
            std::string::npos);
  AccessTrace negative = trace_of({{0}});
  negative.non_model_bytes[0] = -5;
  EXPECT_NE(error_of([&] { negative.validate(1); }).find("-5 non-model bytes"), std::string::npos);
  EXPECT_THROW(trace_of({{0}, {2}}).validate(2), InternalError);
}

TEST(NextUseTest, FindsTheNextAccessWrappingIntoTheNextIteration) {
  // T = 4. Chunk 0 at moments 0 and 2, chunk 1 at 0 and 3, chunk 2 only at 1, chunk 3 never.
  const NextUse next(trace_of({{0, 1}, {2}, {0}, {1}}), 4);
  EXPECT_EQ(next.num_moments(), 4);
  EXPECT_EQ(next.num_chunks(), 4);
  EXPECT_EQ(next.next_use(0, 0), 2);  // strictly after: moment 0's own access does not count
  EXPECT_EQ(next.next_use(0, 1), 2);
  EXPECT_EQ(next.next_use(0, 2), 4);  // wraps to moment 0 of the next iteration
  EXPECT_EQ(next.next_use(0, 3), 4);
  EXPECT_EQ(next.next_use(1, 0), 3);
  EXPECT_EQ(next.next_use(1, 3), 4);
  EXPECT_EQ(next.next_use(2, 0), 1);
  EXPECT_EQ(next.next_use(2, 1), 5);  // only use is moment 1: a whole iteration later
  EXPECT_EQ(next.next_use(2, 3), 5);
  for (int64_t t = 0; t < 4; ++t) EXPECT_EQ(next.next_use(3, t), NextUse::kNever);
  // Moments outside 0..T-1 are answered on the same absolute scale.
  EXPECT_EQ(next.next_use(0, -1), 0);
  EXPECT_EQ(next.next_use(2, -1), 1);
  EXPECT_EQ(next.next_use(0, 5), 6);
  EXPECT_EQ(next.next_use(2, 9), 13);
  EXPECT_THROW(next.next_use(4, 0), InternalError);
}

TEST(NextUseTest, SingleMomentTraceWrapsEveryTime) {
  const NextUse next(trace_of({{0}}), 2);
  EXPECT_EQ(next.next_use(0, 0), 1);
  EXPECT_EQ(next.next_use(1, 0), NextUse::kNever);
}

TEST(ChunkBudgetTest, SubtractsTheLargerNonModelOfThisAndTheNextMoment) {
  AccessTrace trace = trace_of({{}, {}, {}});
  trace.non_model_bytes = {100, 300, 50};
  EXPECT_EQ(device_chunk_budget_bytes(trace, 0, 1000), 700);  // 1000 - max(100, 300)
  EXPECT_EQ(device_chunk_budget_bytes(trace, 1, 1000), 700);  // 1000 - max(300, 50)
  EXPECT_EQ(device_chunk_budget_bytes(trace, 2, 1000), 900);  // 1000 - max(50, 100): wraps
  EXPECT_EQ(device_chunk_budget_bytes(trace, 0, 200), 0);     // floored at 0
  EXPECT_EQ(device_chunk_budget_bytes(trace, 2, 200), 100);
  EXPECT_EQ(device_chunk_capacities(trace, 1000, 300), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(device_chunk_capacities(trace, 200, 64), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_THROW(device_chunk_budget_bytes(trace, 3, 1000), InternalError);
  EXPECT_THROW(device_chunk_budget_bytes(trace, 0, -1), ConfigError);
  EXPECT_THROW(device_chunk_capacities(trace, 1000, 0), InternalError);
}

TEST(ChooseEvictionsTest, FurthestNextUseFirstTiesToTheLargerId) {
  // T = 4. At moment 0: chunk 1 next used at 1, chunks 2 and 3 at 2, chunk 4 at 4 (next
  // iteration), chunk 5 never.
  const NextUse next(trace_of({{0, 4}, {1}, {2, 3}, {0}}), 6);
  const std::vector<int64_t> movable = {1, 2, 3, 4, 5};
  EXPECT_EQ(choose_evictions(next, 0, movable, 5), (std::vector<int64_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(choose_evictions(next, 0, movable, 2), (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(choose_evictions(next, 0, {2, 1, 3}, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(choose_evictions(next, 0, movable, 0).empty());
  // At moment 2 chunk 1's next use (5) is further than chunk 4's (4).
  EXPECT_EQ(choose_evictions(next, 2, {1, 4}, 1), (std::vector<int64_t>{1}));
  EXPECT_NE(error_of([&] {
              choose_evictions(next, 1, {2, 3}, 3);
            }).find("3 chunks must leave the device but only 2"),
            std::string::npos);
  EXPECT_THROW(choose_evictions(next, 1, {2, 3}, 3), OutOfMemoryError);
}

TEST(SimulateOptTest, CyclicTraceLargerThanTheDevice) {
  // Chunks 0, 1, 2 used one per moment with room for two. Worked by hand:
  //   iteration 0: load 0, load 1, evict 1 (next use 4 > chunk 0's 3), load 2 -> resident {0, 2}
  //   iteration 1: hit 0; evict 0 (3 > chunk 2's 2), load 1; hit 2            -> {1, 2}
  //   iteration 2: evict 2, load 0; hit 1; evict 1, load 2                     -> {0, 2}
  // so the steady state alternates 1 and 2 loads (and evictions) per iteration. LRU would miss
  // every access.
  const AccessTrace trace = trace_of({{0}, {1}, {2}});
  const std::vector<int64_t> capacity = {2, 2, 2};
  MoveCounts first = simulate_opt(trace, 3, capacity, 1, 0);
  EXPECT_EQ(first.loads, 3);
  EXPECT_EQ(first.evictions, 1);
  MoveCounts steady = simulate_opt(trace, 3, capacity, 3, 1);
  EXPECT_EQ(steady.loads, 3);
  EXPECT_EQ(steady.evictions, 3);
  steady = simulate_opt(trace, 3, capacity, 5, 1);
  EXPECT_EQ(steady.loads, 6);
  EXPECT_EQ(steady.evictions, 6);
  EXPECT_EQ(simulate_opt(trace, 3, capacity, 5, 5).total(), 0);
  EXPECT_EQ(optimal_moves_exhaustive(trace, 3, capacity, 3, 1).total(), 6);
  EXPECT_EQ(optimal_moves_exhaustive(trace, 3, capacity, 3, 0).total(), 10);
}

TEST(SimulateOptTest, EvictsAheadWhenCapacityShrinks) {
  // Moment 1 uses no chunk, but non-model memory leaves room for one: of {0, 1}, chunk 0 (next
  // use 3) goes, chunk 1 (next use 2) stays.
  const AccessTrace trace = trace_of({{0, 1}, {}, {1}});
  const std::vector<int64_t> capacity = {2, 1, 2};
  MoveCounts first = simulate_opt(trace, 2, capacity, 1, 0);
  EXPECT_EQ(first.loads, 2);
  EXPECT_EQ(first.evictions, 1);
  MoveCounts steady = simulate_opt(trace, 2, capacity, 4, 1);
  EXPECT_EQ(steady.loads, 3);  // chunk 0 once per iteration
  EXPECT_EQ(steady.evictions, 3);
  // Capacity 0 empties the device.
  steady = simulate_opt(trace, 2, {2, 0, 2}, 4, 1);
  EXPECT_EQ(steady.loads, 6);
  EXPECT_EQ(steady.evictions, 6);
}

TEST(SimulateOptTest, ChunksThatFitStayResidentAcrossIterations) {
  const AccessTrace trace = trace_of({{0, 1}, {2}, {1, 2}});
  MoveCounts counts = simulate_opt(trace, 4, {3, 3, 3}, 4, 0);
  EXPECT_EQ(counts.loads, 3);
  EXPECT_EQ(counts.evictions, 0);
  EXPECT_EQ(simulate_opt(trace, 4, {3, 3, 3}, 4, 1).total(), 0);
}

TEST(SimulateOptTest, OutOfMemoryNamesMomentChunksAndCapacity) {
  const AccessTrace trace = trace_of({{0}, {3, 1, 2}, {0}});
  const std::vector<int64_t> capacity = {4, 2, 4};
  const std::string message = error_of([&] { simulate_opt(trace, 4, capacity, 2, 1); });
  EXPECT_NE(message.find("moment 1 needs 3 chunks"), std::string::npos) << message;
  EXPECT_NE(message.find("chunks 3 1 2"), std::string::npos) << message;
  EXPECT_NE(message.find("holds only 2"), std::string::npos) << message;
  EXPECT_THROW(simulate_opt(trace, 4, capacity, 2, 1), OutOfMemoryError);
  EXPECT_EQ(error_of([&] { optimal_moves_exhaustive(trace, 4, capacity, 2, 1); }), message);
  EXPECT_THROW(optimal_moves_exhaustive(trace, 4, capacity, 2, 1), OutOfMemoryError);
}

TEST(SimulateOptTest, RejectsBadArguments) {
  const AccessTrace trace = trace_of({{0}, {1}});
  EXPECT_THROW(simulate_opt(trace, 2, {1}, 1, 0), InternalError);      // one capacity short
  EXPECT_THROW(simulate_opt(trace, 2, {1, -1}, 1, 0), InternalError);  // negative capacity
  EXPECT_THROW(simulate_opt(trace, 2, {1, 1}, 0, 0), InternalError);   // no iterations
  EXPECT_THROW(simulate_opt(trace, 2, {1, 1}, 2, 3), InternalError);   // window past the end
  EXPECT_THROW(simulate_opt(trace, 1, {1, 1}, 1, 0), InternalError);   // chunk 1 out of range
}

TEST(OptimalMovesExhaustiveTest, RefusesLargeInstances) {
  const AccessTrace trace = trace_of({{0}, {12}});
  EXPECT_NE(error_of([&] {
              optimal_moves_exhaustive(trace, 13, {1, 1}, 1, 0);
            }).find("at most 12"),
            std::string::npos);
  EXPECT_THROW(optimal_moves_exhaustive(trace_of({{0}, {11}}), 12, {1, 1}, 1000, 0), ConfigError);
}

// Note [eviction order]: the exhaustive optimum gets the uncounted iterations for free. Here
// capacity 1 at moment 0 forces chunks 1 and 2 out every iteration. Counting one iteration after a
// warm-up, the optimum evicts chunk 1 at the end of the warm-up (uncounted) and pays 3 moves
// instead of 4; a planner that evicted it early every iteration would just pay that eviction
// inside the window instead. The gap stays 1 move however long the window is.
TEST(OptimalMovesExhaustiveTest, CountedWindowGivesTheOptimumAFreeStart) {
  const AccessTrace trace = trace_of({{0}, {1}, {2}});
  const std::vector<int64_t> capacity = {1, 3, 3};
  EXPECT_EQ(simulate_opt(trace, 3, capacity, 2, 1).total(), 4);
  EXPECT_EQ(optimal_moves_exhaustive(trace, 3, capacity, 2, 1).total(), 3);
  EXPECT_EQ(simulate_opt(trace, 3, capacity, 21, 1).total(), 80);
  EXPECT_EQ(optimal_moves_exhaustive(trace, 3, capacity, 21, 1).total(), 79);
  // Counted from the cold start, the planner is optimal.
  const MoveCounts planner = simulate_opt(trace, 3, capacity, 2, 0);
  const MoveCounts best = optimal_moves_exhaustive(trace, 3, capacity, 2, 0);
  EXPECT_EQ(planner.loads, best.loads);
  EXPECT_EQ(planner.evictions, best.evictions);
}

struct Instance {
  AccessTrace trace;
  int64_t num_chunks = 0;
  std::vector<int64_t> capacity;
};

// C in 3..8, 1..6 moments, each using up to 3 chunks (or up to C-1), with a capacity per moment
// of the chunks it uses plus up to 2 (or up to C) more.
Instance random_instance(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Instance instance;
  instance.num_chunks = uniform(3, 8);
  const int64_t num_moments = uniform(1, 6);
  const bool wide = uniform(0, 1) == 1;
  std::vector<int64_t> ids(static_cast<size_t>(instance.num_chunks));
  for (int64_t t = 0; t < num_moments; ++t) {
    const int64_t used = uniform(0, wide ? instance.num_chunks - 1 : 3);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    instance.trace.accesses.emplace_back(ids.begin(), ids.begin() + used);
    instance.trace.non_model_bytes.push_back(0);
    instance.capacity.push_back(
        std::min(instance.num_chunks, used + uniform(0, wide ? instance.num_chunks : 2)));
  }
  return instance;
}

constexpr int kRandomInstances = 2000;

TEST(SimulateOptTest, EqualsTheExhaustiveOptimumFromAColdStart) {
  for (int seed = 0; seed < kRandomInstances; ++seed) {
    const Instance in = random_instance(seed);
    for (int iterations : {1, 3}) {
      const MoveCounts planner = simulate_opt(in.trace, in.num_chunks, in.capacity, iterations, 0);
      const MoveCounts best =
          optimal_moves_exhaustive(in.trace, in.num_chunks, in.capacity, iterations, 0);
      ASSERT_EQ(planner.total(), best.total())
          << "seed " << seed << ", " << iterations << " iterations";
    }
  }
}

// The planner's moves against the exhaustive optimum's over many traces: never fewer, at most
// `bound` times as many (0: not bounded), the worst and mean ratios kept for the report.
struct AgainstTheOptimum {
  double bound = 0;
  double worst = 1.0, sum = 0;
  int worst_seed = -1, counted = 0;

  void add(int seed, int64_t planner, int64_t best) {
    ASSERT_GE(planner, best) << "seed " << seed;
    if (best == 0) {
      ASSERT_EQ(planner, 0) << "seed " << seed;
      return;
    }
    const double ratio = static_cast<double>(planner) / static_cast<double>(best);
    if (bound > 0)
      EXPECT_LE(ratio, bound) << "seed " << seed << ": " << planner << " moved, optimum " << best;
    sum += ratio;
    ++counted;
    if (ratio > worst) {
      worst = ratio;
      worst_seed = seed;
    }
  }
  double mean() const { return counted > 0 ? sum / counted : 1.0; }
};

TEST(SimulateOptTest, SteadyStateWithinTenPercentOfTheExhaustiveOptimum) {
  // Long windows, so the free start the optimum gets (Note [eviction order]) is amortised.
  constexpr int kIterations = 20, kMeasureFrom = 4;
  AgainstTheOptimum stats{1.10};
  for (int seed = 0; seed < kRandomInstances; ++seed) {
    const Instance in = random_instance(seed);
    stats.add(
        seed, simulate_opt(in.trace, in.num_chunks, in.capacity, kIterations, kMeasureFrom).total(),
        optimal_moves_exhaustive(in.trace, in.num_chunks, in.capacity, kIterations, kMeasureFrom)
            .total());
  }
  std::cout << "[ eviction ] worst steady-state ratio (planner / exhaustive optimum, iterations "
            << kMeasureFrom << ".." << kIterations - 1 << ", " << kRandomInstances
            << " traces): " << stats.worst << " (seed " << stats.worst_seed << ")\n";
}

TEST(SimulateOptTest, ShortWindowsLoseAtMostTheLargestCapacity) {
  // Windows of 1 or 2 iterations: the ratio can reach 2x, but the gap in moves stays bounded.
  double worst = 1.0;
  int64_t worst_gap = 0;
  for (int seed = 0; seed < kRandomInstances; ++seed) {
    const Instance in = random_instance(seed);
    const int64_t largest = *std::max_element(in.capacity.begin(), in.capacity.end());
    for (int iterations : {2, 3}) {
      const int64_t planner =
          simulate_opt(in.trace, in.num_chunks, in.capacity, iterations, 1).total();
      const int64_t best =
          optimal_moves_exhaustive(in.trace, in.num_chunks, in.capacity, iterations, 1).total();
      ASSERT_GE(planner, best);
      EXPECT_LE(planner - best, largest) << "seed " << seed << ", " << iterations << " iterations";
      worst_gap = std::max(worst_gap, planner - best);
      if (best > 0) {
        worst = std::max(worst, static_cast<double>(planner) / static_cast<double>(best));
      }
    }
  }
  std::cout << "[ eviction ] short windows (1-2 iterations): worst ratio " << worst
            << ", worst gap " << worst_gap << " moves\n";
}

// Note [mixed chunk sizes]: chunks of two sizes, as a model with a few oversized modules has them.
struct SizedInstance {
  AccessTrace trace;
  std::vector<int64_t> sizes;
  std::vector<int64_t> capacity;
};

// C in 3..8 ordinary chunks of size 4, of which up to two are oversized (size 6..16); 1..6
// moments using up to 3 chunks each, with a capacity per moment of their size plus up to twice
// the largest chunk, capped at the model.
SizedInstance random_sized_instance(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  SizedInstance in;
  const int64_t chunks = uniform(3, 8);
  in.sizes.assign(static_cast<size_t>(chunks), 4);
  const int64_t oversized = uniform(1, 2);
  for (int64_t i = 0; i < oversized; ++i)
    in.sizes[static_cast<size_t>(uniform(0, chunks - 1))] = uniform(6, 16);
  int64_t total = 0, largest = 0;
  for (int64_t s : in.sizes) {
    total += s;
    largest = std::max(largest, s);
  }
  const int64_t num_moments = uniform(1, 6);
  std::vector<int64_t> ids(static_cast<size_t>(chunks));
  for (int64_t t = 0; t < num_moments; ++t) {
    const int64_t used = uniform(0, 3);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    in.trace.accesses.emplace_back(ids.begin(), ids.begin() + used);
    in.trace.non_model_bytes.push_back(0);
    int64_t need = 0;
    for (int64_t i = 0; i < used; ++i) need += in.sizes[static_cast<size_t>(ids[i])];
    in.capacity.push_back(std::min(total, need + uniform(0, 2 * largest)));
  }
  return in;
}

TEST(SimulateOptTest, EqualSizesGiveTheCountsTimesTheSize) {
  for (int seed = 0; seed < 200; ++seed) {
    const Instance in = random_instance(seed);
    std::vector<int64_t> capacity = in.capacity;
    for (int64_t& c : capacity) c *= 3;
    const std::vector<int64_t> sizes(static_cast<size_t>(in.num_chunks), 3);
    const MoveCounts counted = simulate_opt(in.trace, in.num_chunks, in.capacity, 4, 1);
    const MoveCounts sized = simulate_opt(in.trace, sizes, capacity, 4, 1);
    ASSERT_EQ(sized.loads, 3 * counted.loads) << "seed " << seed;
    ASSERT_EQ(sized.evictions, 3 * counted.evictions) << "seed " << seed;
    ASSERT_EQ(optimal_moves_exhaustive(in.trace, sizes, capacity, 4, 1).total(),
              3 * optimal_moves_exhaustive(in.trace, in.num_chunks, in.capacity, 4, 1).total())
        << "seed " << seed;
  }
}

// Evicting until the bytes fit, furthest next use first: one large chunk frees the room of two
// small ones, and a small one is not enough for a large load.
TEST(ChooseEvictionsBySizeTest, EvictsFurthestFirstUntilTheExcessIsFree) {
  // Chunk 0 (size 8) is used next at moment 3, chunk 1 (4) at 2, chunk 2 (4) at 1.
  const NextUse next(trace_of({{}, {2}, {1}, {0}}), 3);
  const std::vector<int64_t> sizes = {8, 4, 4};
  EXPECT_EQ(choose_evictions_by_size(next, 0, {0, 1, 2}, sizes, 5), (std::vector<int64_t>{0}));
  EXPECT_EQ(choose_evictions_by_size(next, 0, {1, 2}, sizes, 5), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(choose_evictions_by_size(next, 0, {0, 1, 2}, sizes, 0).empty());
  EXPECT_NE(error_of([&] {
              choose_evictions_by_size(next, 0, {1, 2}, sizes, 9);
            }).find("free only 8"),
            std::string::npos);
}

// With sizes, furthest-next-use is a heuristic (Note [mixed chunk sizes]): never better than the
// optimum, and the gap is reported, not bounded. The engine is held to this simulator instead.
TEST(SimulateOptTest, MixedSizesNeverBeatTheExhaustiveOptimumAndTheGapIsReported) {
  constexpr int kIterations = 20, kMeasureFrom = 4;
  AgainstTheOptimum stats;
  for (int seed = 0; seed < kRandomInstances; ++seed) {
    const SizedInstance in = random_sized_instance(seed);
    stats.add(seed,
              simulate_opt(in.trace, in.sizes, in.capacity, kIterations, kMeasureFrom).total(),
              optimal_moves_exhaustive(in.trace, in.sizes, in.capacity, kIterations, kMeasureFrom)
                  .total());
  }
  std::cout << "[ eviction ] mixed sizes: worst steady-state ratio (planner / exhaustive optimum "
            << "of moved size, iterations " << kMeasureFrom << ".." << kIterations - 1 << ", "
            << kRandomInstances << " traces): " << stats.worst << " (seed " << stats.worst_seed
            << "), mean " << stats.mean() << "\n";
}

}  // namespace
}  // namespace pstar::chunk

namespace pstar::chunk {
namespace {

TEST(ShardingTest, ChunkKIsInGroupKOverNAndOwnedByRankKModN) {
  Sharding single;
  for (int64_t k = 0; k < 5; ++k) {
    EXPECT_TRUE(single.owns(k));
    EXPECT_EQ(single.group_of(k), k);
  }
  for (int64_t rank = 0; rank < 4; ++rank) {
    Sharding s{rank, 4};
    EXPECT_EQ(s.group_of(9), 2);
    EXPECT_EQ(s.owner_of(9), 1);
    EXPECT_EQ(s.owns(9), rank == 1);
    EXPECT_EQ(s.first_of_group(2), 8);
    int64_t owned = 0;
    for (int64_t k = 0; k < 10; ++k) owned += s.owns(k) ? 1 : 0;
    EXPECT_EQ(owned, rank < 2 ? 3 : 2);
  }
}

}  // namespace
}  // namespace pstar::chunk
