// The held-out windows an evaluation reads (docs/training.md#held-out-loss).
//
// Note [evaluation windows]
// A held-out source of M tokens has W = floor((M - 1) / S) disjoint windows of S + 1 tokens, window
// k starting at k·S. An evaluation reads N = min(eval_batches × B, W) of them (B the micro-batch
// size), spread evenly over the source: window i (0-based) is k_i = floor(i·W / N), so all W when
// N = W. The set depends on nothing else (no seed, no step, no world size, no random numbers), so
// every evaluation of a run, and `pstar eval` later, reads the same windows. With R ranks, rank r
// reads windows r, r + R, r + 2R, ... in micro-batches of up to B, and every rank runs the same
// number of micro-batches (the chunk engine's forward gathers parameters in collectives): a rank
// whose share runs out early gets empty batches.
#pragma once

#include <cstdint>
#include <vector>

#include "pstar/data/batch_sampler.h"
#include "pstar/data/token_source.h"

namespace pstar::data {

class EvalWindows : public EvalBatches {
 public:
  EvalWindows(const TokenSource& source, int64_t seq_len, int64_t micro_batch, int64_t batches,
              int64_t rank = 0, int64_t world_size = 1);

  int64_t windows() const override { return count_; }             // N, over all ranks
  int64_t batches_per_rank() const override { return batches_; }  // the same on every rank
  // Start offsets of this rank's micro-batch b (0-based, < batches_per_rank()); may be empty.
  std::vector<int64_t> offsets(int64_t b) const;
  // Its inputs and targets, [rows, S] int64 on the CPU (rows = offsets(b).size()).
  Batch batch(int64_t b) const override;
  // One window (the source's first) for a forward whose loss is not counted: a rank with an
  // empty micro-batch runs it to take part in the others' collectives.
  Batch filler() const override;

 private:
  Batch read(const std::vector<int64_t>& starts) const;

  const TokenSource& source_;
  int64_t seq_len_, micro_batch_, rank_, world_size_;
  int64_t whole_ = 0;  // W
  int64_t count_ = 0;  // N
  int64_t batches_ = 0;
};

}  // namespace pstar::data
