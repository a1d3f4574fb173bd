#include "adam_steps.h"

#include <algorithm>

#include "pstar/base/error.h"

namespace pstar::engine {

void AdamSteps::hold(const std::vector<int64_t>& ids) {
  const size_t n = store_.tensors().size();
  held_.assign(n, false);
  for (int64_t id : ids) {
    PSTAR_INTERNAL_ASSERT(id >= 0 && static_cast<size_t>(id) < n, "tensor id ", id, " of ", n);
    held_[static_cast<size_t>(id)] = true;
  }
  rebuild();
}

void AdamSteps::end_step(bool updated) {
  if (held_.empty()) return;
  if (updated) {
    missed_.resize(held_.size(), 0);
    for (size_t i = 0; i < held_.size(); ++i) missed_[i] += held_[i] ? 1 : 0;
  }
  held_.clear();
  rebuild();
}

int64_t AdamSteps::missed(int64_t id) const {
  return static_cast<size_t>(id) < missed_.size() ? missed_[static_cast<size_t>(id)] : 0;
}

void AdamSteps::set_missed(int64_t id, int64_t count) {
  PSTAR_INTERNAL_ASSERT(count >= 0, "a tensor missed ", count, " updates");
  if (missed(id) == count) return;
  missed_.resize(std::max(missed_.size(), store_.tensors().size()), 0);
  missed_[static_cast<size_t>(id)] = count;
  rebuild();
}

const std::vector<AdamRun>* AdamSteps::runs(int64_t k) const {
  if (runs_.empty()) return nullptr;
  const auto it = runs_.find(k);
  return it == runs_.end() ? nullptr : &it->second;
}

void AdamSteps::rebuild() {
  runs_.clear();
  const auto& tensors = store_.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const bool held = i < held_.size() && held_[i];
    const int64_t lag = i < missed_.size() ? missed_[i] : 0;
    if (!held && lag == 0) continue;
    // This rank's elements of the tensor (none where another rank owns its chunk).
    const OwnedPiece piece = store_.owned_piece(tensors[i]);
    if (piece.numel() == 0) continue;
    runs_[piece.chunk].push_back(AdamRun{piece.offset, piece.numel(), lag, held});
  }
  for (auto& [k, runs] : runs_)
    std::sort(runs.begin(), runs.end(),
              [](const AdamRun& a, const AdamRun& b) { return a.begin < b.begin; });
}

void AdamSteps::run(tier::DeviceTier& tier, Place side, const optim::AdamHyper& hyper,
                    float multiplier, const optim::AdamSpan& span,
                    const std::vector<AdamRun>* runs) {
  if (runs == nullptr) {
    tier.adam_step(side, hyper, multiplier, span);
    return;
  }
  const auto at_step = [&](int64_t begin, int64_t end) {
    if (end > begin) tier.adam_step(side, hyper, multiplier, span.slice(begin, end - begin));
  };
  int64_t done = 0;
  for (const AdamRun& r : *runs) {
    PSTAR_INTERNAL_ASSERT(r.begin >= done && r.begin + r.numel <= span.numel, "an Adam run [",
                          r.begin, ", ", r.begin + r.numel, ") outside [", done, ", ", span.numel,
                          ")");
    at_step(done, r.begin);
    const optim::AdamSpan part = span.slice(r.begin, r.numel);
    if (r.held) {
      tier.adam_hold(side, part);
    } else {
      optim::AdamHyper own = hyper;
      own.step = hyper.step - r.lag;
      PSTAR_INTERNAL_ASSERT(own.step >= 1, "a tensor ", r.lag, " updates behind step ", hyper.step);
      tier.adam_step(side, own, multiplier, part);
    }
    done = r.begin + r.numel;
  }
  at_step(done, span.numel);
}

}  // namespace pstar::engine
