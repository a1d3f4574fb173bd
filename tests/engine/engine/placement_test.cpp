// The chunk engine's placement policy on its own: no LibTorch, no payloads (this binary links only
// pstar::placement). The recorder, the margin, kept groups, and eviction and prefetch decisions,
// the evictions held against the OPT simulator over whole runs.
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/chunk/eviction.h"
#include "pstar/engine/placement.h"
#include "pstar/plan/memory_plan.h"

namespace pstar::engine {
namespace {

constexpr int64_t kChunkBytes = 100;  // one chunk's compute payloads
constexpr int64_t kWholeBytes = 400;  // with its optimizer state
constexpr int64_t kChunks = 128;      // chunks the settings describe

// `kChunks` equal chunks, or with `sizes` their multiples of kChunkBytes.
PlacementSettings settings(int64_t budget, int64_t warmup = 1, bool prefetch = true,
                           const std::vector<int64_t>& sizes = {}) {
  PlacementSettings s;
  s.warmup_iterations = warmup;
  s.prefetch = prefetch;
  s.device_budget = budget;
  for (int64_t k = 0; k < kChunks; ++k) {
    const int64_t size = k < static_cast<int64_t>(sizes.size()) ? sizes[k] : 1;
    s.compute_bytes.push_back(size * kChunkBytes);
    s.whole_bytes.push_back(size * kWholeBytes);
  }
  return s;
}

std::vector<int64_t> first_ids(int64_t n) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) ids[static_cast<size_t>(k)] = k;
  return ids;
}

// One iteration as the engine records it: moment t ("m<t>") opens, uses accesses[t] (and
// groups[t]), and its window closes with non_model[t] when the next one opens (the last stays
// open).
void record_iteration(Placement& p, const std::vector<std::vector<int64_t>>& accesses,
                      const std::vector<int64_t>& non_model,
                      const std::vector<std::vector<int64_t>>& groups = {},
                      const std::vector<bool>& backward = {}) {
  p.begin_iteration();
  for (size_t t = 0; t < accesses.size(); ++t) {
    if (t > 0) p.close_window(non_model[t - 1]);
    p.open_moment("m" + std::to_string(t), !backward.empty() && backward[t]);
    p.record_use(accesses[t], groups.empty() ? std::vector<int64_t>{} : groups[t]);
  }
}

DeviceRoom room_of(const std::set<int64_t>& resident, const std::set<int64_t>& busy = {}) {
  DeviceRoom room;
  room.resident.assign(resident.begin(), resident.end());
  for (int64_t k : resident)
    if (!busy.count(k)) room.idle.push_back(k);
  room.capacity_bytes = int64_t{1} << 40;
  return room;
}

TEST(Placement, WarmUpKeepsOnlyWhatIsInUseAndRecordsTheLastIteration) {
  Placement p(settings(1000, /*warmup=*/2));
  const std::vector<std::vector<int64_t>> first = {{0, 1}, {2}, {}};
  const std::vector<std::vector<int64_t>> second = {{1, 0}, {2, 3}, {}};
  record_iteration(p, first, {300, 50, 0});
  // Warm-up: every idle chunk not needed leaves, in id order, whatever the budget.
  EXPECT_EQ(p.evictions({2}, kChunkBytes, room_of({0, 1, 3}), "x"),
            (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(p.evictions({2}, kChunkBytes, room_of({0, 1, 3}, {1}), "x"),
            (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(p.prefetch_candidates().empty());
  EXPECT_FALSE(p.end_iteration());
  EXPECT_FALSE(p.planned());
  record_iteration(p, second, {100, 200, 0});
  ASSERT_TRUE(p.end_iteration());
  // The trace is the last warm-up iteration's uses, with the highest non-model peak per moment.
  EXPECT_EQ(p.trace().accesses, second);
  EXPECT_EQ(p.trace().non_model_bytes, (std::vector<int64_t>{300, 200, 0}));
  EXPECT_EQ(p.moment_names(), (std::vector<std::string>{"m0", "m1", "m2"}));
  EXPECT_EQ(p.peak_non_model(), 300);
  EXPECT_EQ(p.largest_working_set(), 2);
  EXPECT_EQ(p.iterations(), 2);
}

TEST(Placement, LaterIterationsOnlyRaiseTheNonModelPeaks) {
  Placement p(settings(1000));
  record_iteration(p, {{0}, {1}, {}}, {100, 100, 0});
  ASSERT_TRUE(p.end_iteration());
  p.set_margin({}, 2);
  EXPECT_TRUE(p.planned());
  record_iteration(p, {{0}, {1}, {}}, {50, 400, 0});
  EXPECT_FALSE(p.end_iteration());
  EXPECT_EQ(p.trace().non_model_bytes, (std::vector<int64_t>{100, 400, 0}));
  // The window after the optimizer step ends at the next step's first moment: the trace's last.
  p.begin_iteration();
  p.close_window(250);
  EXPECT_EQ(p.trace().non_model_bytes.back(), 250);
}

TEST(Placement, TheMarginFillsTheDeviceShareOrLeavesRoomForTheWorkingSet) {
  // Budget 10000: 9000 usable less the 1000 peak non-model = 8000 = 20 whole chunks.
  Placement p(settings(10000));
  record_iteration(p, {{0, 1, 2}, {3}, {}}, {1000, 0, 0});
  ASSERT_TRUE(p.end_iteration());
  const int64_t usable = static_cast<int64_t>(plan::device_fill_bytes(10000)) - p.peak_non_model();
  EXPECT_EQ(p.margin_size(first_ids(usable / kWholeBytes), int64_t{1} << 40), usable / kWholeBytes);
  // More than fit: room for the largest working set (3) plus one spare stays movable.
  EXPECT_EQ(p.margin_size(first_ids(100), int64_t{1} << 40),
            (usable - 4 * kChunkBytes) / kWholeBytes);
  // The tier's capacity bounds it too, and it is never negative.
  EXPECT_EQ(p.margin_size(first_ids(100), 2000), (2000 - 4 * kChunkBytes) / kWholeBytes);
  EXPECT_EQ(p.margin_size(first_ids(100), 300), 0);
  p.set_margin({5, 6}, 8);
  // The optimizer moment now keeps the margin.
  EXPECT_EQ(p.trace().accesses.back(), (std::vector<int64_t>{5, 6}));
}

TEST(Placement, GroupsStayGatheredUntilTheirPassLastUsesThem) {
  Placement p(settings(1000));
  // Forward 0..2, backward 3..5, optimizer 6.
  const std::vector<std::vector<int64_t>> groups = {{0}, {1}, {0}, {0}, {1}, {2}, {}};
  const std::vector<bool> backward = {false, false, false, true, true, true, false};
  record_iteration(p, std::vector<std::vector<int64_t>>(7), std::vector<int64_t>(7, 0), groups,
                   backward);
  EXPECT_TRUE(p.kept_after(0).empty()) << "nothing is kept before the plan";
  ASSERT_TRUE(p.end_iteration());
  p.set_margin({}, 3);
  EXPECT_EQ(p.kept_after(0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p.kept_after(1), (std::vector<int64_t>{0}));
  EXPECT_TRUE(p.kept_after(2).empty()) << "the forward ends there";
  EXPECT_EQ(p.kept_after(3), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(p.kept_after(4), (std::vector<int64_t>{2}));
  EXPECT_TRUE(p.kept_after(5).empty());
  EXPECT_TRUE(p.kept_after(6).empty());
  EXPECT_TRUE(p.kept_after(99).empty());
}

// Note [collectives beside compute]: the groups the next moment uses, which are gathered ahead; and
// Note [gathering]: the most the gathered groups hold at one moment, as settle keeps them (used
// now, or gathered and used again later in the pass), which the margin leaves room for.
TEST(Placement, TheNextMomentsGroupsAndTheGatheredPeakFollowThePlan) {
  Placement p(settings(10000));
  const std::vector<std::vector<int64_t>> groups = {{0}, {1}, {0}, {0}, {1}, {2}, {}};
  const std::vector<bool> backward = {false, false, false, true, true, true, false};
  record_iteration(p, std::vector<std::vector<int64_t>>(7), std::vector<int64_t>(7, 0), groups,
                   backward);
  EXPECT_TRUE(p.groups_after(0).empty()) << "nothing goes ahead before the plan";
  EXPECT_EQ(p.gathered_peak_bytes({10, 100, 1000}), 0);
  ASSERT_TRUE(p.end_iteration());
  p.set_margin({}, 3);
  EXPECT_EQ(p.groups_after(-1), (std::vector<int64_t>{0}));
  EXPECT_EQ(p.groups_after(0), (std::vector<int64_t>{1}));
  EXPECT_EQ(p.groups_after(4), (std::vector<int64_t>{2}));
  EXPECT_TRUE(p.groups_after(5).empty()) << "the optimizer step gathers nothing";
  EXPECT_TRUE(p.groups_after(6).empty()) << "past the last moment";
  // Moment 1 holds groups 0 (kept for moment 2) and 1; moment 5 holds group 2 alone.
  EXPECT_EQ(p.gathered_peak_bytes({10, 100, 1}), 110);
  EXPECT_EQ(p.gathered_peak_bytes({10, 100, 1000}), 1000);
  // Group 0 is held from moment 0 to 2 (kept for moment 2), beside group 1 at moment 1.
  EXPECT_EQ(p.gathered_peak_bytes({500, 1, 1}), 501);
  // The margin leaves the gathered peak free, like non-model memory.
  const int64_t usable = static_cast<int64_t>(plan::device_fill_bytes(10000));
  EXPECT_EQ(p.margin_size(first_ids(100), int64_t{1} << 40, 0),
            (usable - 2 * kChunkBytes) / kWholeBytes);
  EXPECT_EQ(p.margin_size(first_ids(100), int64_t{1} << 40, 1200),
            (usable - 1200 - 2 * kChunkBytes) / kWholeBytes);
}

// Note [fixed trace]: a later iteration whose moments are not the warm-up's, in order, is an
// InternalError naming both, never a plan applied to the wrong modules.
TEST(Placement, AMomentOtherThanTheWarmUpsIsAnInternalError) {
  Placement p(settings(300));
  record_iteration(p, {{0}, {1}, {}}, {0, 0, 0});
  ASSERT_TRUE(p.end_iteration());
  p.set_margin({}, 2);
  p.begin_iteration();
  p.open_moment("m0", false);
  try {
    p.open_moment("m2", false);
    FAIL() << "a skipped moment was taken as the warm-up's";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"m2\""), std::string::npos) << what;
    EXPECT_NE(what.find("\"m1\""), std::string::npos) << what;
  }
}

TEST(Placement, AMomentThatCannotMakeRoomIsRefusedByName) {
  Placement p(settings(300));  // 3 chunks at every moment
  record_iteration(p, {{0, 1}, {2}, {}}, {0, 0, 0});
  ASSERT_TRUE(p.end_iteration());
  p.set_margin({}, 4);
  p.begin_iteration();
  p.open_moment("m0", false);  // Note [fixed trace]: the warm-up's moment 0
  // Resident 0, 1, 3, all in use: chunk 2 finds no room.
  try {
    p.evictions({2}, kChunkBytes, room_of({0, 1, 3}, {0, 1, 3}), "forward of h.0");
    FAIL() << "no room was found, and none was refused";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("forward of h.0"), std::string::npos) << e.what();
  }
  // With chunk 3 idle it goes: exactly one eviction.
  EXPECT_EQ(p.evictions({2}, kChunkBytes, room_of({0, 1, 3}, {0, 1}), "x"),
            (std::vector<int64_t>{3}));
  // The margin and gathered copies take room first: with one chunk's worth gone, two leave.
  DeviceRoom room = room_of({0, 1, 3}, {0});
  room.margin_bytes = kChunkBytes;
  EXPECT_EQ(p.movable_room_bytes(room), 2 * kChunkBytes);
  EXPECT_EQ(p.evictions({2}, kChunkBytes, room, "x").size(), 2u);
}

// Plays `iterations` iterations of a random trace of `chunks` chunks (chunk k of units[k] ordinary
// chunks' size, 1 where units is short) through the placement's evictions under `budget`, and
// holds the moved bytes to the simulator's (chunk::simulate_opt with sizes) for the same
// capacities, checking the budget at every moment.
void play_against_the_simulator(std::mt19937& rng, int64_t chunks, int max_used, int64_t budget,
                                const std::vector<int64_t>& units, const std::string& what) {
  const int64_t moments = 12;
  std::vector<std::vector<int64_t>> accesses(moments);
  std::vector<int64_t> non_model(moments, 0);
  for (int64_t t = 0; t + 1 < moments; ++t) {
    std::set<int64_t> used;
    const int n = 1 + static_cast<int>(rng() % static_cast<unsigned>(max_used));
    while (static_cast<int>(used.size()) < n) used.insert(static_cast<int64_t>(rng() % chunks));
    accesses[t].assign(used.begin(), used.end());
    non_model[t] = kChunkBytes * static_cast<int64_t>(rng() % 3);
  }
  // The last moment is the optimizer step, which keeps the margin (none here).
  Placement p(settings(budget, 1, true, units));
  record_iteration(p, accesses, non_model);
  ASSERT_TRUE(p.end_iteration());
  p.set_margin({}, chunks);
  const int iterations = 4;
  chunk::MoveCounts played;
  std::set<int64_t> resident;
  for (int it = 0; it < iterations; ++it) {
    p.begin_iteration();
    for (int64_t t = 0; t < moments; ++t) {
      if (t > 0) p.close_window(non_model[t - 1]);
      p.open_moment("m" + std::to_string(t), false);
      const std::vector<int64_t>& need = accesses[t];
      int64_t missing = 0;
      for (int64_t k : need) missing += resident.count(k) ? 0 : p.compute_bytes(k);
      for (int64_t k : p.evictions(need, missing, room_of(resident), "m")) {
        ASSERT_EQ(resident.erase(k), 1u);
        played.evictions += p.compute_bytes(k);
      }
      for (int64_t k : need) resident.insert(k);
      played.loads += missing;
      int64_t held = 0;
      for (int64_t k : resident) held += p.compute_bytes(k);
      EXPECT_LE(held, chunk::device_chunk_budget_bytes(p.trace(), t, budget))
          << what << " moment " << t;
    }
    EXPECT_FALSE(p.end_iteration());
  }
  std::vector<int64_t> bytes, capacity;
  for (int64_t k = 0; k < chunks; ++k) bytes.push_back(p.compute_bytes(k));
  for (int64_t t = 0; t < moments; ++t)
    capacity.push_back(chunk::device_chunk_budget_bytes(p.trace(), t, budget));
  const chunk::MoveCounts sim = chunk::simulate_opt(p.trace(), bytes, capacity, iterations, 0);
  EXPECT_EQ(played.loads, sim.loads) << what;
  EXPECT_EQ(played.evictions, sim.evictions) << what;
}

// The placement's evictions, played over whole runs of a random trace, make exactly the moves of
// the OPT simulator (chunk::simulate_opt) for the same capacities (Note [eviction order]).
TEST(Placement, EvictionsMakeTheMovesOfTheOptSimulator) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 50; ++trial)
    play_against_the_simulator(rng, 8, 3, 5 * kChunkBytes, {}, "trial " + std::to_string(trial));
}

TEST(Placement, PrefetchUsesFreeRoomThenEvictsOnlyWhatNeitherMomentUses) {
  // Moments: 0 uses {0}, 1 uses {1, 2}, 2 uses {3}, then the optimizer step.
  Placement p(settings(3 * kChunkBytes));
  record_iteration(p, {{0}, {1, 2}, {3}, {}}, {0, 0, 0, 0});
  ASSERT_TRUE(p.end_iteration());
  p.set_margin({}, 5);
  p.begin_iteration();
  p.open_moment("m0", false);
  EXPECT_EQ(p.prefetch_candidates(), (std::vector<int64_t>{1, 2}));
  // Resident {0, 4}: one free slot, and 4 (used neither now nor next) may leave for the other.
  PrefetchPlan plan = p.prefetch({1, 2}, {0}, room_of({0, 4}));
  EXPECT_EQ(plan.fetch, 2);
  EXPECT_EQ(plan.evict, (std::vector<int64_t>{4}));
  // With 4 in use nothing may leave: only the free slot.
  plan = p.prefetch({1, 2}, {0}, room_of({0, 4}, {4}));
  EXPECT_EQ(plan.fetch, 1);
  EXPECT_TRUE(plan.evict.empty());
  // No room at all: nothing.
  plan = p.prefetch({1, 2}, {0, 4}, room_of({0, 4, 3}, {3}));
  EXPECT_EQ(plan.fetch, 0);
  p.close_window(0);
  p.open_moment("m1", false);
  EXPECT_EQ(p.prefetch_candidates(), (std::vector<int64_t>{3}));
  p.close_window(0);
  p.open_moment("m2", false);
  EXPECT_TRUE(p.prefetch_candidates().empty()) << "the optimizer step is never prefetched for";
  Placement off(settings(3 * kChunkBytes, 1, /*prefetch=*/false));
  record_iteration(off, {{0}, {1, 2}, {3}, {}}, {0, 0, 0, 0});
  ASSERT_TRUE(off.end_iteration());
  off.set_margin({}, 5);
  off.begin_iteration();
  off.open_moment("m0", false);
  EXPECT_TRUE(off.prefetch_candidates().empty()) << "engine.prefetch false";
}

// Note [mixed chunk sizes]: evictions free bytes, not chunks, and the placement plays the moves of
// the sized simulator (chunk::simulate_opt with sizes) over random traces with one large chunk.
TEST(Placement, MixedSizesEvictBytesAndPlayTheSizedSimulator) {
  // Chunk 0 is three ordinary chunks' size.
  const std::vector<int64_t> sizes = {3};
  {
    Placement p(settings(4 * kChunkBytes, 1, true, sizes));
    record_iteration(p, {{0}, {1}, {2}, {}}, {0, 0, 0, 0});
    ASSERT_TRUE(p.end_iteration());
    p.set_margin({}, 4);
    p.begin_iteration();
    p.open_moment("m0", false);
    // Resident 1, 2 and 3 (3 of 4 units): the large chunk needs two of them to leave.
    const std::vector<int64_t> out = p.evictions({0}, 3 * kChunkBytes, room_of({1, 2, 3}), "m0");
    EXPECT_EQ(out.size(), 2u);
    // Resident the large chunk (3 units): an ordinary one fits beside it, a second one evicts it.
    p.close_window(0);
    p.open_moment("m1", false);
    EXPECT_TRUE(p.evictions({1}, kChunkBytes, room_of({0}), "m1").empty());
    EXPECT_EQ(p.evictions({1, 2}, 2 * kChunkBytes, room_of({0}), "m1"), (std::vector<int64_t>{0}));
    EXPECT_EQ(p.largest_working_set_bytes(), 3 * kChunkBytes);
    // Prefetch takes the wanted chunks in order while they fit: after 1 (free room) chunk 2 does
    // not fit beside the busy large chunk.
    const PrefetchPlan plan = p.prefetch({1, 2}, {0}, room_of({0}, {0}));
    EXPECT_EQ(plan.fetch, 1);
    EXPECT_TRUE(plan.evict.empty());
  }
  // Over random traces, one chunk 2-4x the others: the moves of the sized simulator.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> units(6, 1);
    units[rng() % 6] = 2 + static_cast<int64_t>(rng() % 3);
    play_against_the_simulator(rng, 6, 2, 7 * kChunkBytes, units, "trial " + std::to_string(trial));
  }
}

}  // namespace
}  // namespace pstar::engine
