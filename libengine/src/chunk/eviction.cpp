#include "pstar/chunk/eviction.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <utility>

#include "pstar/base/error.h"

namespace pstar::chunk {
namespace {

std::string join_ids(const std::vector<int64_t>& ids) {
  std::ostringstream out;
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  return out.str();
}

void check_run(const AccessTrace& trace, int64_t num_chunks, const std::vector<int64_t>& capacities,
               int iterations, int measure_from_iteration, const char* what) {
  trace.validate(num_chunks);
  PSTAR_CHECK(static_cast<int64_t>(capacities.size()) == trace.num_moments(), InternalError, what,
              ": ", capacities.size(), " capacities for ", trace.num_moments(),
              " moments; expected one per moment");
  for (size_t t = 0; t < capacities.size(); ++t) {
    PSTAR_CHECK(capacities[t] >= 0, InternalError, what, ": moment ", t, " has capacity ",
                capacities[t], "; expected at least 0");
  }
  PSTAR_CHECK(iterations >= 1, InternalError, what, ": ", iterations,
              " iterations; expected at least 1");
  PSTAR_CHECK(measure_from_iteration >= 0 && measure_from_iteration <= iterations, InternalError,
              what, ": measuring from iteration ", measure_from_iteration, " of ", iterations,
              "; expected 0..", iterations);
}

// Every moment's accessed chunks must fit by themselves.
void check_fits(const AccessTrace& trace, const std::vector<int64_t>& sizes,
                const std::vector<int64_t>& capacities) {
  for (int64_t t = 0; t < trace.num_moments(); ++t) {
    const auto& needed = trace.accesses[t];
    int64_t size = 0;
    for (int64_t chunk : needed) size += sizes[static_cast<size_t>(chunk)];
    if (size > capacities[t]) {
      PSTAR_THROW(OutOfMemoryError, "chunk eviction: moment ", t, " needs ", needed.size(),
                  " chunks on the device at once (chunks ", join_ids(needed), ", size ", size,
                  ") but the device budget there holds only ", capacities[t],
                  "; raise the device memory budget or use smaller chunks");
    }
  }
}

void check_sizes(const std::vector<int64_t>& sizes, const char* what) {
  for (size_t k = 0; k < sizes.size(); ++k)
    PSTAR_CHECK(sizes[k] > 0, InternalError, what, ": chunk ", k, " has size ", sizes[k],
                "; expected more than 0");
}

// `candidates` furthest next use first, ties to the larger id (Note [eviction order]); the first
// `sorted` of them are in order, the rest in any.
std::vector<int64_t> eviction_order(const NextUse& next_use, int64_t moment,
                                    const std::vector<int64_t>& candidates, size_t sorted) {
  std::vector<std::pair<int64_t, int64_t>> keyed;  // (next use, chunk)
  keyed.reserve(candidates.size());
  for (int64_t chunk : candidates) keyed.emplace_back(next_use.next_use(chunk, moment), chunk);
  auto first = [](const auto& a, const auto& b) { return a > b; };
  sorted = std::min(sorted, keyed.size());
  std::partial_sort(keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(sorted), keyed.end(),
                    first);
  std::vector<int64_t> order;
  order.reserve(keyed.size());
  for (const auto& [use, chunk] : keyed) order.push_back(chunk);
  return order;
}

}  // namespace

std::vector<int64_t> choose_evictions(const NextUse& next_use, int64_t moment,
                                      const std::vector<int64_t>& resident_movable, int64_t count) {
  PSTAR_CHECK(count >= 0, InternalError, "choose_evictions: count ", count, " is negative");
  PSTAR_CHECK(count <= static_cast<int64_t>(resident_movable.size()), OutOfMemoryError,
              "chunk eviction: at moment ", moment, " ", count,
              " chunks must leave the device but only ", resident_movable.size(),
              " resident chunks are movable");
  std::vector<int64_t> order =
      eviction_order(next_use, moment, resident_movable, static_cast<size_t>(count));
  order.resize(static_cast<size_t>(count));
  return order;
}

std::vector<int64_t> choose_evictions_by_size(const NextUse& next_use, int64_t moment,
                                              const std::vector<int64_t>& resident_movable,
                                              const std::vector<int64_t>& sizes, int64_t excess) {
  std::vector<int64_t> chosen;
  if (excess <= 0) return chosen;
  int64_t freed = 0;
  for (int64_t chunk :
       eviction_order(next_use, moment, resident_movable, resident_movable.size())) {
    chosen.push_back(chunk);
    freed += sizes[static_cast<size_t>(chunk)];
    if (freed >= excess) return chosen;
  }
  PSTAR_THROW(OutOfMemoryError, "chunk eviction: at moment ", moment, " ", excess,
              " must leave the device but the ", resident_movable.size(),
              " movable resident chunks free only ", freed);
}

MoveCounts simulate_opt(const AccessTrace& trace, int64_t num_chunks,
                        const std::vector<int64_t>& capacity_chunks_per_moment, int iterations,
                        int measure_from_iteration) {
  PSTAR_CHECK(num_chunks >= 0, InternalError, "simulate_opt: ", num_chunks, " chunks");
  return simulate_opt(trace, std::vector<int64_t>(static_cast<size_t>(num_chunks), 1),
                      capacity_chunks_per_moment, iterations, measure_from_iteration);
}

MoveCounts simulate_opt(const AccessTrace& trace, const std::vector<int64_t>& sizes,
                        const std::vector<int64_t>& capacity_per_moment, int iterations,
                        int measure_from_iteration) {
  const auto num_chunks = static_cast<int64_t>(sizes.size());
  check_run(trace, num_chunks, capacity_per_moment, iterations, measure_from_iteration,
            "simulate_opt");
  check_sizes(sizes, "simulate_opt");
  check_fits(trace, sizes, capacity_per_moment);
  const NextUse next_use(trace, num_chunks);
  std::vector<char> resident(static_cast<size_t>(num_chunks), 0);
  std::vector<char> accessed(static_cast<size_t>(num_chunks), 0);
  int64_t resident_size = 0;
  MoveCounts counts;
  std::vector<int64_t> movable;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    const bool measured = iteration >= measure_from_iteration;
    for (int64_t t = 0; t < trace.num_moments(); ++t) {
      const auto& needed = trace.accesses[t];
      int64_t missing = 0;
      for (int64_t chunk : needed) {
        accessed[chunk] = 1;
        missing += resident[chunk] ? 0 : sizes[chunk];
      }
      const int64_t excess = resident_size + missing - capacity_per_moment[t];
      if (excess > 0) {
        movable.clear();
        for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
          if (resident[chunk] && !accessed[chunk]) movable.push_back(chunk);
        }
        for (int64_t chunk : choose_evictions_by_size(next_use, t, movable, sizes, excess)) {
          resident[chunk] = 0;
          resident_size -= sizes[chunk];
          if (measured) counts.evictions += sizes[chunk];
        }
      }
      for (int64_t chunk : needed) {
        accessed[chunk] = 0;
        if (resident[chunk]) continue;
        resident[chunk] = 1;
        resident_size += sizes[chunk];
        if (measured) counts.loads += sizes[chunk];
      }
    }
  }
  return counts;
}

MoveCounts optimal_moves_exhaustive(const AccessTrace& trace, int64_t num_chunks,
                                    const std::vector<int64_t>& capacity_chunks_per_moment,
                                    int iterations, int measure_from_iteration) {
  PSTAR_CHECK(num_chunks >= 0, InternalError, "optimal_moves_exhaustive: ", num_chunks, " chunks");
  return optimal_moves_exhaustive(trace, std::vector<int64_t>(static_cast<size_t>(num_chunks), 1),
                                  capacity_chunks_per_moment, iterations, measure_from_iteration);
}

MoveCounts optimal_moves_exhaustive(const AccessTrace& trace, const std::vector<int64_t>& sizes,
                                    const std::vector<int64_t>& capacity_per_moment, int iterations,
                                    int measure_from_iteration) {
  const auto num_chunks = static_cast<int64_t>(sizes.size());
  check_run(trace, num_chunks, capacity_per_moment, iterations, measure_from_iteration,
            "optimal_moves_exhaustive");
  check_sizes(sizes, "optimal_moves_exhaustive");
  PSTAR_CHECK(num_chunks <= 12, ConfigError, "optimal_moves_exhaustive: ", num_chunks,
              " chunks; the exhaustive search handles at most 12");
  const int64_t steps = trace.num_moments() * iterations;
  int64_t sets_times_choices = 1;  // 3^C: each chunk is absent, kept or evicted
  for (int64_t i = 0; i < num_chunks; ++i) sets_times_choices *= 3;
  PSTAR_CHECK(steps <= (int64_t{1} << 28) / sets_times_choices, ConfigError,
              "optimal_moves_exhaustive: ", steps, " moments over ", num_chunks,
              " chunks is too large for the exhaustive search");
  check_fits(trace, sizes, capacity_per_moment);

  const size_t num_sets = size_t{1} << num_chunks;
  std::vector<int64_t> set_size(num_sets, 0);  // the summed size of each set
  for (size_t set = 1; set < num_sets; ++set) {
    const int low = __builtin_ctz(static_cast<uint32_t>(set));
    set_size[set] = set_size[set & (set - 1)] + sizes[static_cast<size_t>(low)];
  }
  // cost[S]: the least (moved size, loaded size) that leaves exactly the set S on the device.
  using Cost = std::pair<int64_t, int64_t>;
  constexpr int64_t kUnreached = std::numeric_limits<int64_t>::max();
  std::vector<Cost> cost(num_sets, Cost{kUnreached, kUnreached});
  std::vector<Cost> next(num_sets);
  cost[0] = Cost{0, 0};
  for (int iteration = 0; iteration < iterations; ++iteration) {
    const int64_t weight = iteration >= measure_from_iteration ? 1 : 0;
    for (int64_t t = 0; t < trace.num_moments(); ++t) {
      uint32_t needed = 0;
      for (int64_t chunk : trace.accesses[t]) needed |= uint32_t{1} << chunk;
      const int64_t capacity = capacity_per_moment[t];
      std::fill(next.begin(), next.end(), Cost{kUnreached, kUnreached});
      for (uint32_t set = 0; set < num_sets; ++set) {
        if (cost[set].first == kUnreached) continue;
        const int64_t loads = set_size[needed & ~set] * weight;
        const uint32_t others = set & ~needed;
        // Keep any subset of the resident chunks not accessed now; evict the rest.
        for (uint32_t kept = others;; kept = (kept - 1) & others) {
          const uint32_t after = needed | kept;
          if (set_size[after] <= capacity) {
            const int64_t evictions = set_size[others & ~kept] * weight;
            const Cost candidate{cost[set].first + loads + evictions, cost[set].second + loads};
            next[after] = std::min(next[after], candidate);
          }
          if (kept == 0) break;
        }
      }
      cost.swap(next);
    }
  }
  const Cost best = *std::min_element(cost.begin(), cost.end());
  PSTAR_INTERNAL_ASSERT(best.first != kUnreached, "no schedule fits, yet every moment fits");
  MoveCounts counts;
  counts.loads = best.second;
  counts.evictions = best.first - best.second;
  return counts;
}

}  // namespace pstar::chunk
