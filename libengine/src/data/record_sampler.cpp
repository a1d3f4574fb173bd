// Micro-batches of packed records (Note [record sampling], Note [packed batches]).
#include "pstar/data/record_sampler.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "pstar/base/error.h"
#include "pstar/formats/record_file.h"
#include "record_plan.h"

namespace pstar::data {
namespace {

// Rows of [S] inputs, targets, positions and segments, filled window by window.
class Rows {
 public:
  Rows(int64_t rows, int64_t seq_len)
      : seq_len_(seq_len),
        inputs_(at::zeros({rows, seq_len}, at::kLong)),
        targets_(at::full({rows, seq_len}, kIgnoreIndex, at::kLong)),
        positions_(at::empty({rows, seq_len}, at::kLong)),
        segments_(at::empty({rows, seq_len}, at::kLong)) {}

  void fill(int64_t row, const RecordSource& source, const std::vector<RecordPiece>& pieces) {
    int64_t* in = inputs_.data_ptr<int64_t>() + row * seq_len_;
    int64_t* target = targets_.data_ptr<int64_t>() + row * seq_len_;
    int64_t* position = positions_.data_ptr<int64_t>() + row * seq_len_;
    int64_t* segment = segments_.data_ptr<int64_t>() + row * seq_len_;
    int64_t at = 0, piece = 0;
    for (const RecordPiece& p : pieces) {
      tokens_.resize(static_cast<size_t>(p.tokens));
      source.read(p.record, 0, p.tokens, tokens_.data());
      PSTAR_INTERNAL_ASSERT(at + p.tokens - 1 <= seq_len_, "a window of ", at + p.tokens - 1,
                            " positions");
      for (int64_t j = 0; j + 1 < p.tokens; ++j, ++at) {
        const uint32_t next = tokens_[static_cast<size_t>(j) + 1];
        in[at] = formats::record_token_id(tokens_[static_cast<size_t>(j)]);
        target[at] =
            formats::record_token_counts(next) ? formats::record_token_id(next) : kIgnoreIndex;
        position[at] = j;
        segment[at] = piece;
      }
      ++piece;
    }
    // Padding: input 0 and target kIgnoreIndex (from the constructor), a segment of its own.
    for (int64_t j = 0; at < seq_len_; ++j, ++at) {
      position[at] = j;
      segment[at] = piece;
    }
  }

  Batch batch() const { return Batch{inputs_, targets_, positions_, segments_}; }

 private:
  int64_t seq_len_;
  at::Tensor inputs_, targets_, positions_, segments_;
  std::vector<uint32_t> tokens_;
};

}  // namespace

RecordSampler::RecordSampler(const RecordSource& source, Sampling sampling, bool packing,
                             int64_t micro_batch, int64_t seq_len, int64_t accumulation_steps,
                             uint64_t seed, int64_t rank, int64_t world_size)
    : source_(source),
      plan_(std::make_unique<RecordPlan>(source, sampling, packing, seq_len, seed)),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      accumulation_steps_(accumulation_steps),
      rank_(rank),
      world_size_(world_size) {
  PSTAR_INTERNAL_ASSERT(rank >= 0 && rank < world_size && micro_batch >= 1 && seq_len >= 1);
}

RecordSampler::~RecordSampler() = default;

Batch RecordSampler::batch(int64_t step, int64_t micro) const {
  PSTAR_INTERNAL_ASSERT(step >= 1 && micro >= 1 && micro <= accumulation_steps_);
  Rows rows(micro_batch_, seq_len_);
  for (int64_t j = 0; j < micro_batch_; ++j) {
    // Note [record sampling]: the global sample index, as for token windows.
    const int64_t k =
        ((step - 1) * accumulation_steps_ + (micro - 1)) * world_size_ * micro_batch_ +
        rank_ * micro_batch_ + j;
    rows.fill(j, source_, plan_->window(k));
  }
  return rows.batch();
}

std::vector<RecordPiece> RecordSampler::window(int64_t k) const { return plan_->window(k); }

int64_t RecordSampler::windows_in_epoch(int64_t epoch) const {
  return plan_->windows_in_epoch(epoch);
}

int64_t RecordSampler::global_counted_targets(int64_t step) const {
  const int64_t per_step = accumulation_steps_ * world_size_ * micro_batch_;
  int64_t total = 0;
  for (int64_t k = (step - 1) * per_step; k < step * per_step; ++k)
    total += plan_->counted_targets(k);
  return total;
}

RecordEvalWindows::RecordEvalWindows(const RecordSource& source, bool packing, int64_t seq_len,
                                     int64_t micro_batch, int64_t batches, int64_t rank,
                                     int64_t world_size)
    : source_(source),
      plan_(std::make_unique<RecordPlan>(source, Sampling::kSequential, packing, seq_len, 0)),
      seq_len_(seq_len),
      micro_batch_(micro_batch),
      rank_(rank),
      world_size_(world_size) {
  PSTAR_INTERNAL_ASSERT(rank >= 0 && rank < world_size && micro_batch >= 1 && batches >= 1);
  whole_ = plan_->windows_in_epoch(0);
  count_ = std::min(whole_, batches * micro_batch);
  const int64_t most_per_rank = (count_ + world_size - 1) / world_size;
  batches_ = std::max<int64_t>(1, (most_per_rank + micro_batch - 1) / micro_batch);
  for (int64_t i = 0; i < count_; ++i)
    counted_ +=
        plan_->counted_targets(static_cast<int64_t>(static_cast<__int128>(i) * whole_ / count_));
}

RecordEvalWindows::~RecordEvalWindows() = default;

std::vector<int64_t> RecordEvalWindows::window_indices(int64_t b) const {
  PSTAR_INTERNAL_ASSERT(b >= 0 && b < batches_);
  std::vector<int64_t> out;
  for (int64_t j = b * micro_batch_; j < (b + 1) * micro_batch_; ++j) {
    const int64_t i = rank_ + j * world_size_;  // Note [evaluation windows]
    if (i >= count_) break;
    out.push_back(static_cast<int64_t>(static_cast<__int128>(i) * whole_ / count_));
  }
  return out;
}

Batch RecordEvalWindows::batch(int64_t b) const {
  const std::vector<int64_t> windows = window_indices(b);
  Rows rows(static_cast<int64_t>(windows.size()), seq_len_);
  for (size_t j = 0; j < windows.size(); ++j)
    rows.fill(static_cast<int64_t>(j), source_, plan_->window(windows[j]));
  return rows.batch();
}

Batch RecordEvalWindows::filler() const {
  Rows rows(1, seq_len_);
  rows.fill(0, source_, plan_->window(0));
  return rows.batch();
}

}  // namespace pstar::data
