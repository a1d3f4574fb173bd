#include "pstar/core/setup_phases.h"

#include <algorithm>

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/base/size.h"
#include "pstar/core/log.h"

namespace pstar::core {

const char* setup_phase_name(SetupPhase phase) {
  switch (phase) {
    case SetupPhase::kRanks:
      return "ranks";
    case SetupPhase::kPlan:
      return "plan";
    case SetupPhase::kTier:
      return "tier";
    case SetupPhase::kModel:
      return "model";
    case SetupPhase::kInit:
      return "init";
    case SetupPhase::kWeights:
      return "weights";
    case SetupPhase::kChunks:
      return "chunks";
    case SetupPhase::kAlloc:
      return "alloc";
    case SetupPhase::kEngine:
      return "engine";
    case SetupPhase::kData:
      return "data";
    case SetupPhase::kCheckpoint:
      return "checkpoint";
    case SetupPhase::kResume:
      return "resume";
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown set-up phase ", static_cast<int>(phase));
}

void SetupPhases::add(SetupPhase phase, double seconds, int64_t bytes) {
  const auto i = static_cast<size_t>(phase);
  PSTAR_INTERNAL_ASSERT(i < kNumSetupPhases, "unknown set-up phase ", i);
  entries_[i].seconds += seconds;
  entries_[i].bytes += bytes;
}

void SetupPhases::merge(const SetupPhases& other) {
  for (size_t i = 0; i < kNumSetupPhases; ++i) {
    entries_[i].seconds += other.entries_[i].seconds;
    entries_[i].bytes += other.entries_[i].bytes;
  }
}

double SetupPhases::total_seconds() const {
  double total = 0;
  for (const Entry& e : entries_) total += e.seconds;
  return total;
}

std::string SetupPhases::summary(double total_s) const {
  // Below this a phase is noise in a line meant to say where the time went.
  constexpr double kShown = 0.05;
  std::string out;
  for (size_t i = 0; i < kNumSetupPhases; ++i) {
    const Entry& e = entries_[i];
    if (e.seconds < kShown) continue;
    out += str_cat(out.empty() ? "" : ", ", setup_phase_name(static_cast<SetupPhase>(i)), " ",
                   format_fixed(e.seconds, 1), " s");
    if (e.bytes > 0)
      out += str_cat(" (", format_bytes(e.bytes), " at ",
                     format_bytes(static_cast<int64_t>(static_cast<double>(e.bytes) / e.seconds)),
                     "/s)");
  }
  const double other = std::max(0.0, total_s - total_seconds());
  if (other >= kShown)
    out += str_cat(out.empty() ? "" : ", ", "other ", format_fixed(other, 1), " s");
  return out;
}

double PhaseTimer::stop() {
  if (stopped_) return 0;
  stopped_ = true;
  const double seconds = seconds_since(begin_);
  if (phases_ != nullptr) phases_->add(phase_, seconds, bytes_);
  return seconds;
}

SetupProgress::SetupProgress(std::string what, int64_t total_bytes)
    : what_(std::move(what)), total_(total_bytes), begin_(Clock::now()) {}

SetupProgress::~SetupProgress() {
  if (shown_.load()) log::end_status();
}

void SetupProgress::advance(int64_t bytes) {
  const int64_t done = done_.fetch_add(bytes) + bytes;
  const auto now = Clock::now();
  if (now - begin_ < std::chrono::duration<double>(kShowAfterSeconds)) return;
  // One thread draws; the others go on with their work.
  std::unique_lock<std::mutex> lock(draw_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (shown_.load() && now - last_draw_ < std::chrono::milliseconds(500)) return;
  last_draw_ = now;
  draw(done);
}

void SetupProgress::draw(int64_t done) {
  const double elapsed = seconds_since(begin_);
  const double rate = static_cast<double>(done) / std::max(elapsed, 1e-9);
  const double eta =
      rate > 0 ? static_cast<double>(std::max<int64_t>(0, total_ - done)) / rate : 0.0;
  // The first line is printed whatever the logger's plain-line throttle says: a phase that
  // outlasts 2 s is announced at once.
  log::status(str_cat(what_, ": ", format_bytes(done), " of ", format_bytes(total_), ", ",
                      format_bytes(static_cast<int64_t>(rate)), "/s, ETA ", format_duration(eta)),
              /*force=*/!shown_.load());
  shown_.store(true);
}

}  // namespace pstar::core
