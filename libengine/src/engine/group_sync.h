// Group synchronisation (Note [gathering] in engine/chunked_engine.h): ZeRO's all-gather of a
// communication group's parameters before use, their release after, and the reduce-scatter of its
// gradients to their owners. The only part of the engine that talks to the communicator. With one
// rank (no communicator) every call is a no-op or the identity.
#pragma once

#include <cstdint>
#include <vector>

#include "chunk_store.h"

namespace pstar::dist {
class Communicator;
}

namespace pstar::engine {

// Note [staged collectives]
// The communicator moves host memory (Gloo's rings, Note [ring collectives]). Where the host
// cannot address the tier's device blocks (the CUDA tier: ranks sharing a GPU over Gloo), a group's
// device-side payloads travel through host blocks of GroupSync's own, one per part: before an
// all-gather this rank's part is copied out, after it the others' are copied in; a reduce-scatter
// reads each device-side gradient from a host copy and writes this rank's sum back through one.
// Each copy is waited for before the bytes are used or the host block is reused. The staging
// blocks count in the host budget. On the emulated tier nothing is staged; tests stage through a
// tier that says it cannot address its device side (CheckingTier), and the losses are the same
// bits. The device communicator (NCCL) will move device payloads without staging.

// A communication group: world_size consecutive chunks, one per rank (Note [chunk layout]).
struct Group {
  bool gathered = false;  // the remote chunks hold this step's parameters
  bool reduced = false;   // this micro-batch's gradients went to their owners
  int64_t tensors = 0, grads_seen = 0;
  bool grads_pending() const { return grads_seen > 0 && !reduced; }
};

// The communicator's figures for the step's metrics, and the bytes staged between device blocks
// and host blocks around the collectives (Note [staged collectives]).
struct SyncFigures {
  int64_t bytes_sent = 0;
  double seconds = 0;
  int64_t staged_bytes = 0;
};

// This rank's share of the chunks with `comm` (null: one rank owns every chunk).
chunk::Sharding sharding_of(const dist::Communicator* comm);

class GroupSync {
 public:
  // `comm` null: one rank.
  GroupSync(ChunkStore& store, dist::Communicator* comm);
  ~GroupSync();
  GroupSync(const GroupSync&) = delete;
  GroupSync& operator=(const GroupSync&) = delete;

  bool active() const { return comm_ != nullptr; }
  // After registration: one group per world_size chunks, and each group's tensor count.
  void build_groups();
  int64_t num_groups() const { return static_cast<int64_t>(groups_.size()); }
  int64_t group_of(int64_t k) const { return store_.sharding().group_of(k); }
  // This rank's chunk of group g.
  int64_t own_chunk(int64_t g) const;
  bool gathered(int64_t g) const { return groups_[static_cast<size_t>(g)].gathered; }
  // Group g's gradients were summed into the owners' chunks this micro-batch.
  bool reduced(int64_t g) const { return groups_[static_cast<size_t>(g)].reduced; }

  // Gives the remote chunks of group g their payloads and fills them from their owners. This
  // rank's chunk of the group is read: its queued Adam must be done.
  void gather(int64_t g);
  void release(int64_t g);
  void release_all();
  // Sums group g's gradients over the ranks into each owner's gradient slot. Unscaled: grad_norm
  // and update divide by the world size.
  void reduce(int64_t g);
  // Between moments: reduces the groups whose gradients are complete, then releases every
  // gathered group that `keep` does not hold.
  void settle(const std::vector<bool>& keep);
  // A gradient arrived for tensor `id` (once per micro-batch counts).
  void grad_arrived(int64_t id);
  // The micro-batch ends: every group's gradients go to their owners, and the counts restart.
  void end_micro_batch();
  // The sum over the ranks.
  double all_reduce_sum(double value);

  int64_t step_gathers() const { return gathers_; }
  int64_t step_reductions() const { return reductions_; }
  void begin_step();
  // What the communicator sent since the last call.
  SyncFigures take_figures();

 private:
  int64_t group_chunk(int64_t g, int64_t part) const;
  // Note [staged collectives]: whether `block` must travel through a host block, and part's host
  // block of at least `bytes`.
  bool staged(const tier::Block& block) const;
  tier::Block& staging(int64_t part, int64_t bytes);
  // A tensor of the group is between its module's pre-hook and its end of use (a tied weight
  // waits in kCompute for its gradient through the whole backward).
  bool in_use(int64_t g) const;

  ChunkStore& store_;
  dist::Communicator* comm_;
  std::vector<Group> groups_;
  std::vector<float> reduced_;        // reduce's fp32 sum of this rank's chunk
  std::vector<tier::Block> staging_;  // Note [staged collectives], one per part
  int64_t gathers_ = 0, reductions_ = 0, staged_bytes_ = 0;
};

}  // namespace pstar::engine
