// The warm-up iteration's record of chunk accesses and non-model memory, and the two questions the
// eviction planner asks of it: when is a chunk next used, and how many bytes may chunks take on the
// device at a moment. Pure C++ (no LibTorch), so the planner can be tested on its own.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace pstar::chunk {

// One training iteration as a sequence of moments 0..T-1: the pre-forward hook of each managed
// module, the pre-backward hook of each, then the optimizer step. Every iteration repeats the same
// sequence, so moment T of a run is moment 0 of the next iteration.
struct AccessTrace {
  // accesses[t]: the chunks (ids in 0..C-1) used on the device at moment t, each at most once.
  std::vector<std::vector<int64_t>> accesses;
  // non_model_bytes[t]: the peak non-model bytes (activations, workspace) on the device since the
  // previous moment.
  std::vector<int64_t> non_model_bytes;

  int64_t num_moments() const { return static_cast<int64_t>(accesses.size()); }

  // Throws InternalError (a trace is recorded by the engine, so a bad one is a bug) unless there is
  // at least one moment, both vectors have one entry per moment, every chunk id lies in
  // 0..num_chunks-1 and appears at most once per moment, and no byte count is negative.
  void validate(int64_t num_chunks) const;
};

// When each chunk is next used, after the warm-up trace. Precomputes each chunk's sorted access
// moments, so a query is a binary search: O(log k) for a chunk accessed at k moments.
class NextUse {
 public:
  // next_use() of a chunk the trace never accesses.
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  // Validates the trace (see AccessTrace::validate).
  NextUse(const AccessTrace& trace, int64_t num_chunks);

  // The first moment strictly after `moment` at which `chunk` is accessed, counting on into the
  // next iteration: for `moment` in 0..T-1 the answer lies in moment+1..moment+T, and a value >= T
  // is a moment of the next iteration (PatrickStar's wrap-around). `moment` may also lie outside
  // 0..T-1 (e.g. -1 for "before the iteration"); the answer is on the same absolute scale.
  // kNever when the trace never accesses `chunk`.
  int64_t next_use(int64_t chunk, int64_t moment) const;

  int64_t num_chunks() const { return static_cast<int64_t>(moments_of_.size()); }
  int64_t num_moments() const { return num_moments_; }

 private:
  int64_t num_moments_;
  std::vector<std::vector<int64_t>> moments_of_;  // per chunk, ascending
};

// Bytes chunks may occupy on the device at `moment` (0..T-1): the device budget less the larger of
// the non-model bytes at this moment and at the next one (moment T-1's next is moment 0 of the
// next iteration), floored at 0. Looking one moment ahead is PatrickStar's rule: chunks are evicted
// before the activations that need their room are allocated.
int64_t device_chunk_budget_bytes(const AccessTrace& trace, int64_t moment,
                                  int64_t device_budget_bytes);

// device_chunk_budget_bytes() for every moment, in whole chunks of `chunk_bytes` (> 0) each: the
// capacities the planner works with.
std::vector<int64_t> device_chunk_capacities(const AccessTrace& trace, int64_t device_budget_bytes,
                                             int64_t chunk_bytes);

}  // namespace pstar::chunk
