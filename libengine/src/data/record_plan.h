// Which records each window holds (Note [record sampling] in record_sampler.h): the epochs'
// orders and their greedy packing, as a pure function of (seed, window index). Private to
// src/data; no LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "pstar/data/batch_sampler.h"
#include "pstar/data/record_sampler.h"
#include "pstar/data/record_source.h"

namespace pstar::data {

class RecordPlan {
 public:
  RecordPlan(const RecordSource& source, Sampling sampling, bool packing, int64_t seq_len,
             uint64_t seed);

  // The records of window k (0-based over all epochs), in row order.
  std::vector<RecordPiece> window(int64_t k) const;
  int64_t windows_in_epoch(int64_t epoch) const;
  // The counted targets of window k's rows (the loss bits of each piece's tokens 1 .. taken - 1).
  int64_t counted_targets(int64_t k) const;
  int64_t usable_records() const { return static_cast<int64_t>(usable_.size()); }

 private:
  // One epoch: its order of usable records (indices into usable_) and where each window starts.
  struct Epoch {
    int64_t index = -1;
    std::vector<int64_t> order;
    std::vector<int64_t> starts;  // window w is order[starts[w], starts[w + 1])
  };
  std::shared_ptr<const Epoch> epoch(int64_t e) const;  // built or cached; takes the mutex
  std::shared_ptr<const Epoch> build(int64_t e) const;  // no lock needed
  // Epoch and window within it of window k; takes the mutex.
  std::pair<std::shared_ptr<const Epoch>, int64_t> locate(int64_t k) const;

  Sampling sampling_;
  bool packing_;
  int64_t seq_len_;
  uint64_t seed_;
  std::vector<int64_t> usable_;   // records of 2 tokens or more, in file order
  std::vector<int64_t> taken_;    // tokens taken of each: min(size, seq_len + 1)
  std::vector<int64_t> counted_;  // its counted targets among those
  mutable std::mutex mutex_;
  mutable std::vector<int64_t> first_window_{0};    // windows before epoch e, for e known so far
  mutable std::shared_ptr<const Epoch> recent_[2];  // the last two epochs asked for
};

}  // namespace pstar::data
