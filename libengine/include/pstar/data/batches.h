// What training and evaluation read each micro-batch: a Batch, and the two interfaces that make
// them, over token windows (BatchSampler, EvalWindows) or over records (RecordSampler,
// RecordEvalWindows).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace pstar::data {

// The target of a position that does not count in the loss: cross_entropy's default
// ignore_index, so `cross_entropy(logits, targets)` already leaves those positions out.
constexpr int64_t kIgnoreIndex = -100;

// Note [packed batches]
// inputs and targets are [B, S] int64 on the CPU. Token windows (data.path, data.text) leave
// positions and segments undefined (at::Tensor()): every row is one causal sequence, position j
// at j, and every target counts. Records (data.jsonl) define both, [B, S] int64:
//   positions[b, j]  where position j of row b is in its own record: 0 at each record's first
//                    input, so RoPE angles (Llama) and wpe rows (GPT) restart per record;
//   segments[b, j]   which piece of the row it belongs to: 0, 1, 2, ... for the records packed
//                    into the row in order, and one more for the padding at its end (if any).
// A model must let position i attend to position j only when j <= i AND
// segments[b, i] == segments[b, j] (a block-diagonal causal mask; with packing off there is one
// record and one padding segment a row), and embed positions[b, j] rather than j. The padding is
// a segment of its own, so that no row of the mask is empty (no NaN from a softmax over nothing);
// its inputs are id 0 and its targets kIgnoreIndex. Targets are kIgnoreIndex wherever a token does
// not count (prompts, system turns, template markup, padding), so the loss over a global batch is
// the sum of the per-token losses over the targets != kIgnoreIndex of every micro-batch on every
// rank, divided by their number (RecordSampler::global_counted_targets gives it without a
// collective).
struct Batch {
  at::Tensor inputs;     // [B, S] int64, on CPU
  at::Tensor targets;    // [B, S] int64, on CPU; kIgnoreIndex where a target does not count
  at::Tensor positions;  // [B, S] int64, or undefined: position j is j
  at::Tensor segments;   // [B, S] int64, or undefined: one causal sequence a row
  bool packed() const { return segments.defined(); }
};

// Training micro-batches as a pure function of (step, micro-batch) for this rank (Note
// [sequential sampling] in batch_sampler.h; Note [record sampling] in record_sampler.h).
class TrainBatches {
 public:
  virtual ~TrainBatches() = default;
  // step and micro are 1-based; micro <= the accumulation steps.
  virtual Batch batch(int64_t step, int64_t micro) const = 0;
};

// The held-out micro-batches of an evaluation (Note [evaluation windows] in eval_windows.h).
class EvalBatches {
 public:
  virtual ~EvalBatches() = default;
  virtual int64_t windows() const = 0;           // over all ranks
  virtual int64_t batches_per_rank() const = 0;  // the same on every rank
  // This rank's micro-batch b (0-based, < batches_per_rank()); may have no rows.
  virtual Batch batch(int64_t b) const = 0;
  // One row for a forward whose loss is not counted (a rank with an empty micro-batch runs it to
  // take part in the others' collectives).
  virtual Batch filler() const = 0;
};

}  // namespace pstar::data
