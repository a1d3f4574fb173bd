#include "pstar/engine/placement.h"

#include <algorithm>
#include <iterator>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/chunk/eviction.h"
#include "pstar/plan/memory_plan.h"

namespace pstar::engine {

Placement::Placement(const PlacementSettings& settings) : settings_(settings) {
  PSTAR_INTERNAL_ASSERT(settings_.compute_chunk_bytes > 0 && settings_.whole_chunk_bytes > 0,
                        "chunk bytes ", settings_.compute_chunk_bytes, ", ",
                        settings_.whole_chunk_bytes);
}

void Placement::begin_iteration() {
  moment_ = -1;
  accesses_.clear();
  non_model_.clear();
  groups_.clear();
  backward_.clear();
}

void Placement::close_window(int64_t non_model) {
  if (moment_ >= 0) {
    non_model_[moment_] = std::max(non_model_[moment_], non_model);
  } else if (!trace_.non_model_bytes.empty()) {
    // The window after last iteration's optimizer step ends here.
    auto& last = trace_.non_model_bytes.back();
    last = std::max(last, non_model);
  }
}

void Placement::open_moment(const std::string& name, bool in_backward) {
  ++moment_;
  accesses_.emplace_back();
  groups_.emplace_back();
  backward_.push_back(in_backward);
  non_model_.push_back(0);
  if (iteration_ == 0) moment_names_.push_back(name);
}

void Placement::record_use(std::vector<int64_t> chunks, std::vector<int64_t> groups) {
  PSTAR_INTERNAL_ASSERT(moment_ >= 0, "a use recorded before the first moment");
  accesses_[moment_] = std::move(chunks);
  groups_[moment_] = std::move(groups);
}

bool Placement::end_iteration() {
  ++iteration_;
  if (!planned_) {
    // Several warm-up iterations: keep each moment's highest non-model peak.
    if (warmup_non_model_.size() == non_model_.size()) {
      for (size_t t = 0; t < non_model_.size(); ++t)
        non_model_[t] = std::max(non_model_[t], warmup_non_model_[t]);
    }
    warmup_non_model_ = non_model_;
    if (iteration_ < settings_.warmup_iterations) return false;
    trace_.accesses = accesses_;
    trace_.non_model_bytes = non_model_;
    plan_kept_groups();
    return true;
  }
  if (static_cast<int64_t>(non_model_.size()) == trace_.num_moments()) {
    // Later iterations keep the record current: non-model peaks only ever raise the plan's.
    for (int64_t t = 0; t < trace_.num_moments(); ++t)
      trace_.non_model_bytes[t] = std::max(trace_.non_model_bytes[t], non_model_[t]);
  }
  return false;
}

int64_t Placement::peak_non_model() const {
  int64_t peak = 0;
  for (int64_t bytes : trace_.non_model_bytes) peak = std::max(peak, bytes);
  return peak;
}

int64_t Placement::largest_working_set() const {
  int64_t largest = 0;
  for (int64_t t = 0; t < trace_.num_moments(); ++t)
    largest = std::max<int64_t>(largest, static_cast<int64_t>(trace_.accesses[t].size()));
  return largest;
}

int64_t Placement::margin_size(int64_t movable, int64_t capacity_bytes) const {
  const int64_t whole = settings_.whole_chunk_bytes;
  const double usable = std::min(
      plan::device_fill_bytes(settings_.device_budget) - static_cast<double>(peak_non_model()),
      static_cast<double>(capacity_bytes));
  if (static_cast<double>(movable * whole) <= usable) return movable;
  // Keep room for the largest working set of the chunks that stay movable, plus one spare.
  const double left =
      usable - static_cast<double>((largest_working_set() + 1) * settings_.compute_chunk_bytes);
  return std::clamp<int64_t>(static_cast<int64_t>(left / static_cast<double>(whole)), 0, movable);
}

void Placement::set_margin(const std::vector<int64_t>& margin, int64_t num_chunks) {
  PSTAR_INTERNAL_ASSERT(!planned_ && trace_.num_moments() > 0, "the margin is set once, after ",
                        "the warm-up");
  // The optimizer moment now keeps the margin on the device.
  trace_.accesses.back() = margin;
  next_use_.emplace(trace_, num_chunks);
  planned_ = true;
}

// The groups to keep gathered past moment t besides those it uses: those used again before the
// pass (forward or backward) ends. One backward sweep over the trace at plan time, so a moment
// only looks its answer up.
void Placement::plan_kept_groups() {
  const auto moments = static_cast<int64_t>(groups_.size());
  kept_after_.assign(static_cast<size_t>(moments), {});
  for (int64_t t = moments - 2; t >= 0; --t) {
    const auto& next = groups_[t + 1];
    if (backward_[t + 1] != backward_[t] || next.empty()) continue;
    std::vector<int64_t> merged;
    std::set_union(next.begin(), next.end(), kept_after_[t + 1].begin(), kept_after_[t + 1].end(),
                   std::back_inserter(merged));
    kept_after_[t] = std::move(merged);
  }
}

const std::vector<int64_t>& Placement::kept_after(int64_t moment) const {
  static const std::vector<int64_t> kNone;
  if (!planned_ || moment < 0 || moment >= static_cast<int64_t>(kept_after_.size())) return kNone;
  return kept_after_[static_cast<size_t>(moment)];
}

// The budget rule (the larger non-model peak of this moment and the next) or the tier's capacity,
// less the margin and the gathered copies.
int64_t Placement::movable_capacity(const DeviceRoom& room) const {
  const int64_t bytes =
      std::min(chunk::device_chunk_budget_bytes(trace_, moment_, settings_.device_budget),
               room.capacity_bytes) -
      room.margin_bytes - room.gathered_bytes;
  return std::max<int64_t>(0, bytes / settings_.compute_chunk_bytes);
}

std::vector<int64_t> Placement::evictions(const std::vector<int64_t>& need, int64_t missing,
                                          const DeviceRoom& room, const std::string& what) const {
  std::vector<int64_t> candidates;  // resident, movable, idle, not needed now
  for (int64_t k : room.idle)
    if (!std::binary_search(need.begin(), need.end(), k)) candidates.push_back(k);
  // The warm-up keeps only what is in use.
  if (!planned_ || moment_ >= trace_.num_moments()) return candidates;
  const int64_t capacity = movable_capacity(room);
  const auto resident = static_cast<int64_t>(room.resident.size());
  const int64_t evict = std::max<int64_t>(0, resident + missing - capacity);
  PSTAR_CHECK(evict <= static_cast<int64_t>(candidates.size()), OutOfMemoryError,
              "device tier: ", what, " needs ", need.size(), " chunk(s) of ",
              format_bytes(settings_.compute_chunk_bytes),
              " on the device, but after non-model memory and the pinned margin only ", capacity,
              " fit in engine.device_memory ", format_bytes(settings_.device_budget),
              "; raise engine.device_memory or lower default_chunk_size");
  return chunk::choose_evictions(*next_use_, moment_, candidates, evict);
}

std::vector<int64_t> Placement::prefetch_candidates() const {
  // The last moment is the optimizer step, which keeps only the margin on the device.
  if (!settings_.prefetch || !planned_ || moment_ + 2 >= trace_.num_moments()) return {};
  return trace_.accesses[moment_ + 1];
}

PrefetchPlan Placement::prefetch(int64_t wanted, const std::vector<int64_t>& need_now,
                                 const DeviceRoom& room) const {
  PrefetchPlan out;
  if (wanted <= 0) return out;
  const std::vector<int64_t>& next = trace_.accesses[moment_ + 1];
  const auto listed = [](const std::vector<int64_t>& list, int64_t k) {
    return std::find(list.begin(), list.end(), k) != list.end();
  };
  std::vector<int64_t> candidates;  // resident, movable, idle, used neither now nor next
  for (int64_t k : room.idle)
    if (!listed(need_now, k) && !listed(next, k)) candidates.push_back(k);
  const int64_t capacity = movable_capacity(room);
  const auto resident = static_cast<int64_t>(room.resident.size());
  out.fetch = std::min(wanted, capacity - resident + static_cast<int64_t>(candidates.size()));
  if (out.fetch <= 0) {
    out.fetch = 0;
    return out;
  }
  const int64_t evict = std::max<int64_t>(0, resident + out.fetch - capacity);
  out.evict = chunk::choose_evictions(*next_use_, moment_, candidates, evict);
  return out;
}

}  // namespace pstar::engine
