#include "pstar/engine/placement.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/chunk/eviction.h"
#include "pstar/plan/memory_plan.h"

namespace pstar::engine {

Placement::Placement(const PlacementSettings& settings) : settings_(settings) {
  PSTAR_INTERNAL_ASSERT(settings_.compute_bytes.size() == settings_.whole_bytes.size(),
                        settings_.compute_bytes.size(), " compute sizes but ",
                        settings_.whole_bytes.size(), " whole sizes");
  for (size_t k = 0; k < settings_.compute_bytes.size(); ++k)
    PSTAR_INTERNAL_ASSERT(settings_.compute_bytes[k] > 0 && settings_.whole_bytes[k] > 0, "chunk ",
                          k, " bytes ", settings_.compute_bytes[k], ", ", settings_.whole_bytes[k]);
}

int64_t Placement::bytes_of(const std::vector<int64_t>& chunks) const {
  int64_t bytes = 0;
  for (int64_t k : chunks) bytes += compute_bytes(k);
  return bytes;
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
  // Note [fixed trace]: every iteration's moments are the first's, in order.
  PSTAR_INTERNAL_ASSERT(
      iteration_ == 0 || (moment_ < static_cast<int64_t>(moment_names_.size()) &&
                          moment_names_[static_cast<size_t>(moment_)] == name),
      "iteration ", iteration_ + 1, "'s moment ", moment_, " is \"", name,
      "\" but the warm-up's was \"",
      moment_ < static_cast<int64_t>(moment_names_.size())
          ? moment_names_[static_cast<size_t>(moment_)]
          : std::string("(none: the warm-up had fewer moments)"),
      "\": the model's modules ran in another order (Note [fixed trace]: every module must run "
      "every micro-batch, an expert with no tokens on an empty batch)");
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
    planned_groups_ = groups_;
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

int64_t Placement::largest_working_set_bytes() const {
  int64_t largest = 0;
  for (const auto& used : trace_.accesses) largest = std::max(largest, bytes_of(used));
  return largest;
}

int64_t Placement::gathered_peak_bytes(const std::vector<int64_t>& group_bytes) const {
  std::set<int64_t> held;
  int64_t peak = 0;
  for (size_t t = 0; t < planned_groups_.size(); ++t) {
    const std::vector<int64_t>& used = planned_groups_[t];
    const std::vector<int64_t>& kept = kept_after(static_cast<int64_t>(t));
    std::set<int64_t> now(used.begin(), used.end());
    for (int64_t g : held)
      if (std::binary_search(kept.begin(), kept.end(), g)) now.insert(g);
    held = std::move(now);
    int64_t bytes = 0;
    for (int64_t g : held) bytes += group_bytes[static_cast<size_t>(g)];
    peak = std::max(peak, bytes);
  }
  return peak;
}

int64_t Placement::margin_size(const std::vector<int64_t>& candidates, int64_t capacity_bytes,
                               int64_t gathered_bytes) const {
  const double usable = std::min(plan::device_fill_bytes(settings_.device_budget) -
                                     static_cast<double>(peak_non_model() + gathered_bytes),
                                 static_cast<double>(capacity_bytes - gathered_bytes));
  int64_t all = 0;
  for (int64_t k : candidates) all += settings_.whole_bytes[static_cast<size_t>(k)];
  const auto count = static_cast<int64_t>(candidates.size());
  if (static_cast<double>(all) <= usable) return count;
  // Keep room for the largest working set of the chunks that stay movable, plus the largest
  // chunk as a spare.
  const int64_t largest_chunk =
      *std::max_element(settings_.compute_bytes.begin(), settings_.compute_bytes.end());
  const double left = usable - static_cast<double>(largest_working_set_bytes() + largest_chunk);
  int64_t taken = 0;
  double held = 0;
  for (int64_t k : candidates) {
    held += static_cast<double>(settings_.whole_bytes[static_cast<size_t>(k)]);
    if (held > left) break;
    ++taken;
  }
  return taken;
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

const std::vector<int64_t>& Placement::groups_after(int64_t moment) const {
  static const std::vector<int64_t> kNone;
  const int64_t next = moment + 1;
  if (!planned_ || next < 0 || next >= static_cast<int64_t>(planned_groups_.size())) return kNone;
  return planned_groups_[static_cast<size_t>(next)];
}

const std::vector<int64_t>& Placement::kept_after(int64_t moment) const {
  static const std::vector<int64_t> kNone;
  if (!planned_ || moment < 0 || moment >= static_cast<int64_t>(kept_after_.size())) return kNone;
  return kept_after_[static_cast<size_t>(moment)];
}

// The budget rule (the larger non-model peak of this moment and the next) or the tier's capacity,
// less the margin and the gathered copies.
int64_t Placement::movable_room_bytes(const DeviceRoom& room) const {
  const int64_t bytes =
      std::min(chunk::device_chunk_budget_bytes(trace_, moment_, settings_.device_budget),
               room.capacity_bytes) -
      room.margin_bytes - room.gathered_bytes;
  return std::max<int64_t>(0, bytes);
}

int64_t Placement::free_movable_bytes(const DeviceRoom& room) const {
  const int64_t bytes =
      std::min(chunk::device_chunk_budget_bytes(trace_, moment_, settings_.device_budget),
               room.capacity_bytes) -
      room.margin_bytes - room.gathered_bytes;
  return bytes - bytes_of(room.resident);
}

// Resident, movable, idle and not needed now: what may leave.
std::vector<int64_t> Placement::idle_not_needed(const std::vector<int64_t>& need,
                                                const DeviceRoom& room) {
  std::vector<int64_t> candidates;
  for (int64_t k : room.idle)
    if (!std::binary_search(need.begin(), need.end(), k)) candidates.push_back(k);
  return candidates;
}

std::vector<int64_t> Placement::evictions(const std::vector<int64_t>& need, int64_t missing_bytes,
                                          const DeviceRoom& room, const std::string& what) const {
  const std::vector<int64_t> candidates = idle_not_needed(need, room);
  // The warm-up keeps only what is in use.
  if (!planned_ || moment_ >= trace_.num_moments()) return candidates;
  const int64_t capacity = movable_room_bytes(room);
  const int64_t excess = bytes_of(room.resident) + missing_bytes - capacity;
  PSTAR_CHECK(excess <= bytes_of(candidates), OutOfMemoryError, "device tier: ", what, " needs ",
              need.size(), " chunk(s) of ", format_bytes(bytes_of(need)),
              " on the device, but after non-model memory and the pinned margin only ",
              format_bytes(capacity), " of chunks fit in engine.device_memory ",
              format_bytes(settings_.device_budget),
              "; raise engine.device_memory or lower default_chunk_size");
  return chunk::choose_evictions_by_size(*next_use_, moment_, candidates, settings_.compute_bytes,
                                         excess);
}

std::vector<int64_t> Placement::eviction_order(const std::vector<int64_t>& need,
                                               const DeviceRoom& room) const {
  const std::vector<int64_t> candidates = idle_not_needed(need, room);
  if (!planned_ || moment_ >= trace_.num_moments() || candidates.empty()) return candidates;
  int64_t all = 0;
  for (int64_t k : candidates) all += compute_bytes(k);
  return chunk::choose_evictions_by_size(*next_use_, moment_, candidates, settings_.compute_bytes,
                                         all);
}

std::vector<int64_t> Placement::prefetch_candidates() const {
  // The last moment is the optimizer step, which keeps only the margin on the device.
  if (!settings_.prefetch || !planned_ || moment_ + 2 >= trace_.num_moments()) return {};
  return trace_.accesses[moment_ + 1];
}

PrefetchPlan Placement::prefetch(const std::vector<int64_t>& wanted,
                                 const std::vector<int64_t>& need_now,
                                 const DeviceRoom& room) const {
  PrefetchPlan out;
  if (wanted.empty()) return out;
  const std::vector<int64_t>& next = trace_.accesses[moment_ + 1];
  const auto listed = [](const std::vector<int64_t>& list, int64_t k) {
    return std::find(list.begin(), list.end(), k) != list.end();
  };
  std::vector<int64_t> candidates;  // resident, movable, idle, used neither now nor next
  for (int64_t k : room.idle)
    if (!listed(need_now, k) && !listed(next, k)) candidates.push_back(k);
  // Free room first, then what the candidates can give: the first uploads that fit in both.
  const int64_t free = movable_room_bytes(room) - bytes_of(room.resident);
  const int64_t room_for = free + bytes_of(candidates);
  int64_t fetched = 0;
  for (int64_t k : wanted) {
    if (fetched + compute_bytes(k) > room_for) break;
    fetched += compute_bytes(k);
    ++out.fetch;
  }
  if (out.fetch == 0) return out;
  out.evict = chunk::choose_evictions_by_size(*next_use_, moment_, candidates,
                                              settings_.compute_bytes, fetched - free);
  return out;
}

}  // namespace pstar::engine
