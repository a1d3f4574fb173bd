#include "pstar/chunk/access_trace.h"

#include <algorithm>

#include "pstar/base/error.h"

namespace pstar::chunk {

void AccessTrace::validate(int64_t num_chunks) const {
  PSTAR_CHECK(num_chunks >= 0, InternalError, "access trace: the chunk count is ", num_chunks,
              "; expected at least 0");
  PSTAR_CHECK(!accesses.empty(), InternalError,
              "access trace: no moments were recorded; the warm-up iteration must record at least "
              "one");
  PSTAR_CHECK(non_model_bytes.size() == accesses.size(), InternalError,
              "access trace: ", accesses.size(), " moments of accesses but ",
              non_model_bytes.size(), " of non-model bytes; expected one of each per moment");
  std::vector<int64_t> last_seen(static_cast<size_t>(num_chunks), -1);
  for (int64_t t = 0; t < num_moments(); ++t) {
    PSTAR_CHECK(non_model_bytes[t] >= 0, InternalError, "access trace: moment ", t, " has ",
                non_model_bytes[t], " non-model bytes; expected at least 0");
    for (int64_t chunk : accesses[t]) {
      PSTAR_CHECK(chunk >= 0 && chunk < num_chunks, InternalError, "access trace: moment ", t,
                  " accesses chunk ", chunk, "; expected an id in 0..", num_chunks - 1);
      PSTAR_CHECK(last_seen[chunk] != t, InternalError, "access trace: moment ", t, " lists chunk ",
                  chunk, " more than once");
      last_seen[chunk] = t;
    }
  }
}

NextUse::NextUse(const AccessTrace& trace, int64_t num_chunks) : num_moments_(trace.num_moments()) {
  trace.validate(num_chunks);
  moments_of_.resize(static_cast<size_t>(num_chunks));
  // Moments are visited in order, so each list comes out ascending.
  for (int64_t t = 0; t < num_moments_; ++t) {
    for (int64_t chunk : trace.accesses[t]) moments_of_[chunk].push_back(t);
  }
}

int64_t NextUse::next_use(int64_t chunk, int64_t moment) const {
  PSTAR_CHECK(chunk >= 0 && chunk < num_chunks(), InternalError, "next_use: chunk ", chunk,
              " is not in 0..", num_chunks() - 1);
  const std::vector<int64_t>& moments = moments_of_[chunk];
  if (moments.empty()) return kNever;
  // Split `moment` into the start of its iteration and a moment within it (floor division, so
  // negative moments belong to earlier iterations).
  int64_t iteration = moment / num_moments_;
  if (moment % num_moments_ < 0) --iteration;
  const int64_t base = iteration * num_moments_;
  const int64_t local = moment - base;
  auto later = std::upper_bound(moments.begin(), moments.end(), local);
  if (later != moments.end()) return base + *later;
  return base + num_moments_ + moments.front();  // wraps into the next iteration
}

int64_t device_chunk_budget_bytes(const AccessTrace& trace, int64_t moment,
                                  int64_t device_budget_bytes) {
  const int64_t num_moments = trace.num_moments();
  PSTAR_CHECK(moment >= 0 && moment < num_moments, InternalError, "chunk budget: moment ", moment,
              " is not in 0..", num_moments - 1);
  PSTAR_CHECK(trace.non_model_bytes.size() == trace.accesses.size(), InternalError,
              "chunk budget: the trace has ", num_moments, " moments of accesses but ",
              trace.non_model_bytes.size(), " of non-model bytes");
  PSTAR_CHECK(device_budget_bytes >= 0, ConfigError, "chunk budget: the device budget is ",
              device_budget_bytes, " bytes; expected at least 0");
  const int64_t next = (moment + 1) % num_moments;
  const int64_t non_model = std::max(trace.non_model_bytes[moment], trace.non_model_bytes[next]);
  return std::max<int64_t>(0, device_budget_bytes - non_model);
}

std::vector<int64_t> device_chunk_capacities(const AccessTrace& trace, int64_t device_budget_bytes,
                                             int64_t chunk_bytes) {
  PSTAR_CHECK(chunk_bytes > 0, InternalError, "chunk capacities: chunk size is ", chunk_bytes,
              " bytes; expected more than 0");
  std::vector<int64_t> capacities(static_cast<size_t>(trace.num_moments()));
  for (int64_t t = 0; t < trace.num_moments(); ++t) {
    capacities[t] = device_chunk_budget_bytes(trace, t, device_budget_bytes) / chunk_bytes;
  }
  return capacities;
}

}  // namespace pstar::chunk
