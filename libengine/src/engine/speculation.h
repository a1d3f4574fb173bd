// The rollback space of speculative host Adam (Note [speculative adam] in hybrid_adam.h): slots
// that each hold one chunk's speculated state (parameters, master weights and moments) beside the
// chunk's own, so that the chunk's own stays as it was until the step's norm says the speculation
// stands. Owned by HybridAdam; counts against the host budget.
#pragma once

#include <cstdint>
#include <vector>

#include "chunk_store.h"
#include "pstar/optim/host_adam.h"

namespace pstar::engine {

class SpeculationSlots {
 public:
  explicit SpeculationSlots(ChunkStore& store) : store_(store) {}
  ~SpeculationSlots();
  SpeculationSlots(const SpeculationSlots&) = delete;
  SpeculationSlots& operator=(const SpeculationSlots&) = delete;

  // Makes slots until there are `wanted` or the host budget has no room for another beside what
  // the store and the tier's pools hold and `reserve` bytes; returns how many there are.
  int64_t provide(int64_t wanted, int64_t reserve);
  int64_t size() const { return static_cast<int64_t>(slots_.size()); }
  // The host bytes one slot holds.
  int64_t slot_bytes() const;
  int64_t bytes() const { return size() * slot_bytes(); }

  // A free slot, or -1 when every one is taken.
  int take();
  void give_back(int slot);
  // `span` (chunk k's, in place) writing chunk k's new state into `slot` instead: the chunk's own
  // payloads are only read.
  optim::AdamSpan redirect(optim::AdamSpan span, int slot);
  // The speculation stands: chunk k's payloads become the slot's and the slot gets the old ones
  // (a swap of blocks, no copy); the chunk's tensors are re-pointed. The slot is free again.
  void commit(int64_t k, int slot);

 private:
  struct Slot {
    Block param;  // the compute dtype (fp32 training: the new master)
    Block master, exp_avg, exp_avg_sq;
    bool taken = false;
  };
  ChunkStore& store_;
  std::vector<Slot> slots_;
};

}  // namespace pstar::engine
