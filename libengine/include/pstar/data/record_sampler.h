// Micro-batches of records (data.jsonl): records in epochs, shuffled by the seed or in file order,
// packed into windows of seq_len positions, each with its positions and segments (Note [packed
// batches] in batches.h says what a model does with them).
//
// Note [record sampling]
// Global sample k of a step is numbered as in Note [sequential sampling] (batch_sampler.h):
// k = ((s-1)·A + (m-1))·R·B + r·B + (j-1) for sample j of micro-batch m of step s on rank r. The
// records of two tokens or more (one input and its target) are taken epoch after epoch: epoch e's
// order is the file order (data.sampling "sequential") or a Fisher-Yates shuffle driven by a
// counter-based hash of (seed, e) ("random"). The order is cut into windows: with packing,
// greedily, a record joining the current window while its pairs (min(n, S+1) - 1 for a record of
// n tokens, cut to its first S + 1 when longer) still fit in S positions together with those
// already there, else opening the next window; without packing, one record a window. Window k is
// the (k - W_0 - ... - W_{e-1})-th window of the epoch e it falls in (W_e windows in epoch e). So
// which records a step sees and how they are packed depend on the seed and k only: never on the
// rank, the micro-batch size or the world size, and R ranks of B samples see exactly what one rank
// of R·B sees. No record is split across windows; one longer than S + 1 tokens loses its tail.
// Row layout: the window's records one after another, record i giving inputs = its tokens
// 0 .. n-2, targets = tokens 1 .. n-1 (kIgnoreIndex where a token's loss bit is clear), positions
// 0 .. n-2 and segment i; the rest of the row padding (input 0, target kIgnoreIndex, positions
// 0, 1, ... and the next segment).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pstar/data/batch_sampler.h"
#include "pstar/data/batches.h"
#include "pstar/data/record_source.h"

namespace pstar::data {

class RecordPlan;

// One record of a window: its index in the source and the tokens taken (all of it, or its first
// S + 1 when it is longer).
struct RecordPiece {
  int64_t record = 0;
  int64_t tokens = 0;
  bool operator==(const RecordPiece& o) const { return record == o.record && tokens == o.tokens; }
};

class RecordSampler : public TrainBatches {
 public:
  RecordSampler(const RecordSource& source, Sampling sampling, bool packing, int64_t micro_batch,
                int64_t seq_len, int64_t accumulation_steps, uint64_t seed, int64_t rank = 0,
                int64_t world_size = 1);
  ~RecordSampler() override;

  // This rank's micro-batch (Note [record sampling]); step and micro are 1-based.
  Batch batch(int64_t step, int64_t micro) const override;
  // The records of global window k.
  std::vector<RecordPiece> window(int64_t k) const;
  int64_t windows_in_epoch(int64_t epoch) const;
  // The targets that count in the whole global batch of `step`: every micro-batch of every rank.
  // Every rank computes the same number from the plan alone, with no collective; the loss of the
  // step is the sum of its per-target losses over this number (Note [packed batches]).
  int64_t global_counted_targets(int64_t step) const;

 private:
  const RecordSource& source_;
  std::unique_ptr<RecordPlan> plan_;
  int64_t micro_batch_, seq_len_, accumulation_steps_, rank_, world_size_;
};

// The held-out windows of an evaluation over records: the held-out records in file order, packed
// as training packs them (windows W), of which N = min(eval_batches × B, W) spread evenly, window
// i being floor(i·W/N), and rank r reading i = r, r + R, ... (Note [evaluation windows]).
class RecordEvalWindows : public EvalBatches {
 public:
  RecordEvalWindows(const RecordSource& source, bool packing, int64_t seq_len, int64_t micro_batch,
                    int64_t batches, int64_t rank = 0, int64_t world_size = 1);
  ~RecordEvalWindows() override;

  int64_t windows() const override { return count_; }
  int64_t batches_per_rank() const override { return batches_; }
  Batch batch(int64_t b) const override;
  Batch filler() const override;
  // The windows (packing plan's indices) of this rank's micro-batch b.
  std::vector<int64_t> window_indices(int64_t b) const;
  // The targets that count over all N windows (all ranks): what the held-out loss is a mean over.
  int64_t counted_targets() const { return counted_; }

 private:
  const RecordSource& source_;
  std::unique_ptr<RecordPlan> plan_;
  int64_t seq_len_, micro_batch_, rank_, world_size_;
  int64_t whole_ = 0, count_ = 0, batches_ = 0, counted_ = 0;
};

}  // namespace pstar::data
