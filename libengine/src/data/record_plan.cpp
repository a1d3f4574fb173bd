// RecordPlan: epochs, their orders and their windows (Note [record sampling]).
#include "record_plan.h"

#include <algorithm>
#include <numeric>

#include "counter_random.h"
#include "pstar/base/error.h"
#include "pstar/formats/record_file.h"

namespace pstar::data {

RecordPlan::RecordPlan(const RecordSource& source, Sampling sampling, bool packing, int64_t seq_len,
                       uint64_t seed)
    : sampling_(sampling), packing_(packing), seq_len_(seq_len), seed_(seed) {
  std::vector<uint32_t> tokens;
  for (int64_t r = 0; r < source.records(); ++r) {
    const int64_t n = source.size(r);
    if (n < 2) continue;  // no target: never sampled (open_record_sources logs them)
    const int64_t taken = std::min(n, seq_len + 1);
    tokens.resize(static_cast<size_t>(taken));
    source.read(r, 0, taken, tokens.data());
    int64_t counted = 0;
    for (int64_t k = 1; k < taken; ++k)
      counted += formats::record_token_counts(tokens[static_cast<size_t>(k)]) ? 1 : 0;
    usable_.push_back(r);
    taken_.push_back(taken);
    counted_.push_back(counted);
  }
  PSTAR_INTERNAL_ASSERT(!usable_.empty(), source.describe(), " was not validated: no record has ",
                        "a target");
}

std::shared_ptr<const RecordPlan::Epoch> RecordPlan::build(int64_t e) const {
  auto epoch = std::make_shared<Epoch>();
  epoch->index = e;
  const auto n = static_cast<int64_t>(usable_.size());
  epoch->order.resize(static_cast<size_t>(n));
  std::iota(epoch->order.begin(), epoch->order.end(), 0);
  if (sampling_ == Sampling::kRandom) {
    // Fisher-Yates, each swap drawn from a hash of (seed, epoch, position): the order is a pure
    // function of the seed and the epoch.
    const uint64_t h = splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(e));
    for (int64_t i = n - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(
          below(splitmix64(h ^ static_cast<uint64_t>(i)), static_cast<uint64_t>(i + 1)));
      std::swap(epoch->order[static_cast<size_t>(i)], epoch->order[static_cast<size_t>(j)]);
    }
  }
  int64_t used = seq_len_;  // pairs in the open window; "full" so that the first record opens one
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pairs = taken_[static_cast<size_t>(epoch->order[static_cast<size_t>(i)])] - 1;
    if (!packing_ || used + pairs > seq_len_) {
      epoch->starts.push_back(i);
      used = 0;
    }
    used += pairs;
  }
  epoch->starts.push_back(n);
  return epoch;
}

std::shared_ptr<const RecordPlan::Epoch> RecordPlan::epoch(int64_t e) const {
  // Called with mutex_ held.
  for (const auto& recent : recent_)
    if (recent != nullptr && recent->index == e) return recent;
  auto built = build(e);
  recent_[1] = recent_[0];
  recent_[0] = built;
  return built;
}

std::pair<std::shared_ptr<const RecordPlan::Epoch>, int64_t> RecordPlan::locate(int64_t k) const {
  PSTAR_INTERNAL_ASSERT(k >= 0, "window ", k);
  std::lock_guard<std::mutex> lock(mutex_);
  // first_window_[e] is known for the epochs seen so far; extend it epoch by epoch (each needs
  // that epoch's packing) until it passes k.
  while (first_window_.back() <= k) {
    const auto e = static_cast<int64_t>(first_window_.size()) - 1;
    const auto windows = static_cast<int64_t>(epoch(e)->starts.size()) - 1;
    first_window_.push_back(first_window_.back() + windows);
  }
  const auto e = static_cast<int64_t>(
      std::upper_bound(first_window_.begin(), first_window_.end(), k) - first_window_.begin() - 1);
  return {epoch(e), k - first_window_[static_cast<size_t>(e)]};
}

std::vector<RecordPiece> RecordPlan::window(int64_t k) const {
  const auto [ep, w] = locate(k);
  std::vector<RecordPiece> pieces;
  for (int64_t i = ep->starts[static_cast<size_t>(w)]; i < ep->starts[static_cast<size_t>(w) + 1];
       ++i) {
    const auto u = static_cast<size_t>(ep->order[static_cast<size_t>(i)]);
    pieces.push_back({usable_[u], taken_[u]});
  }
  return pieces;
}

int64_t RecordPlan::windows_in_epoch(int64_t e) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(epoch(e)->starts.size()) - 1;
}

int64_t RecordPlan::counted_targets(int64_t k) const {
  const auto [ep, w] = locate(k);
  int64_t total = 0;
  for (int64_t i = ep->starts[static_cast<size_t>(w)]; i < ep->starts[static_cast<size_t>(w) + 1];
       ++i)
    total += counted_[static_cast<size_t>(ep->order[static_cast<size_t>(i)])];
  return total;
}

}  // namespace pstar::data
