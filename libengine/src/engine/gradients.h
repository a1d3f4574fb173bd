// Gradients in chunks: which arrived this micro-batch (per tensor, per chunk), the slot that must
// read as zero for a parameter no loss depends on, the global norm's sums of squares, zeroing for
// the next step, and restoring the parameters after a skipped step (Note [param/grad reuse]).
// Moves no chunk.
#pragma once

#include <cstdint>

#include "chunk_store.h"

namespace pstar::engine {

class Gradients {
 public:
  explicit Gradients(ChunkStore& store) : store_(store) {}

  // Runs just before autograd accumulates tensor `id`'s gradient into its .grad, which views the
  // gradient slot. With reuse the slot still holds the parameter: it is cleared so the sum is the
  // gradient.
  void arrive(int64_t id);
  // A micro-batch begins: no gradient has arrived.
  void reset_arrivals();
  // The micro-batch's backward ended: parameters still waiting for a gradient get none, so their
  // slots must read as zero. `host_touched`: host code will touch payloads below anyway (several
  // ranks), so queued copies must finish first.
  void settle_micro_batch(bool host_touched);
  // The sum of squares of every owned chunk's gradient, added in chunk order whatever the places
  // (an early chunk's came from the worker), so placement does not change the norm's bits.
  double sq_sum();
  // The step ended. Without reuse: zeroes the gradient slots, but those a queued Adam zeroes
  // itself. With reuse and no update (fp16 overflow): restores the parameters from the masters.
  void end_step(bool updated);

 private:
  ChunkStore& store_;
};

}  // namespace pstar::engine
