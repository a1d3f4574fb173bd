// Group synchronisation (Note [gathering] in engine/chunked_engine.h): ZeRO's all-gather of a
// communication group's parameters before use, their release after, and the reduce-scatter of its
// gradients to their owners. The only part of the engine that talks to the communicator. With one
// rank (no communicator) every call is a no-op or the identity.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "chunk_store.h"
#include "pstar/core/ordered_worker.h"

namespace pstar::dist {
class Communicator;
}

namespace pstar::engine {

// Note [staged collectives]
// A communicator moves either host memory (Gloo's rings, Note [ring collectives]) or the memory
// of the rank's GPU (NCCL, Note [device collectives] in pstar/dist/communicator.h): its side.
// Where the tier's two sides are separate memories (the CUDA tier; host_addresses_device() false),
// a payload on the other side travels through a block of the communicator's side, one per part:
// for Gloo a device-side payload (ranks sharing a GPU), for NCCL a host-side one (a host-only
// chunk, the CPU embedding's). Before an all-gather this rank's part is copied out, after it the
// others' are copied in; a reduce-scatter reads each such gradient from a copy and writes this
// rank's sum back through one. Each copy is waited for before the bytes are used or the block is
// reused. Each queued collective (Note [collectives beside compute]) has blocks of its own,
// counted in the budget of their side and freed when it is finished. On the emulated tier
// nothing is staged; tests stage through a tier that says its sides are separate (CheckingTier),
// with a host communicator and with a device one, and the losses are the same bits.
// The reduction's fp32 buffers live on the communicator's side too: host vectors for Gloo, a
// block of the tier's for a device communicator (Note [flat gathers]).

// Note [flat gathers]
// A device communicator takes flat buffers only (Note [flat collectives] in
// pstar/dist/communicator.h), so with one an ordinary group is gathered into a block of the
// communicator's side that holds its N parts side by side, the group's flat block: this rank's
// part is copied into its slot, and every other rank's chunk that computes on that side takes its
// slot as its param payload, filled in place by the gather, so that nothing is copied out. Parts
// on the other side (a host-only group's, the CPU embedding's) are copied out of their slots when
// the gather is finished, and a block with no slot lent goes then; one with slots lent goes when
// the group is released. A split module's span already holds its parts side by side and is
// gathered in place (Note [split modules]), unless it is staged, when it goes through a flat block
// too. A reduction fills one fp32 buffer of the communicator's side, N parts of the largest
// chunk or of a piece of it, with this rank's gradients (widened, the padding zeroed) and the
// communicator leaves the sum of this rank's part in its own slot (reduce_scatter_flat), a piece of
// every part at a time so that the buffer stays within plan::kReduceBufferBytes (256 MiB) whatever
// the chunk size; the worker runs one collective at a time, so one buffer serves every reduction of
// a micro-batch, and it goes when the micro-batch ends. The flat blocks' slots that no chunk holds
// and the reduction's buffer are counted in the device budget (ChunkStore::add_side_bytes) and, as
// gathered memory, in the room placement leaves; remote_device_bytes and reduce_buffer_bytes say
// what they take, for the margin.

// Note [collectives beside compute]
// Every collective of the engine runs on one communication thread (a core::OrderedWorker) in the
// order the main thread queues it (group_sync_queue.cpp). Without beside_compute
// (RunPlan::overlap_comm off) each is waited for where it is queued, reductions before the
// moment's gathers, nothing ahead: the schedule of a main thread that runs them itself. With it
// (the default on several ranks) the main thread waits only for the one it needs next:
// - after the warm-up, a group whose gradients are complete is reduce-scattered while the backward
//   goes on: queued behind the gathers of the moment that found it complete, so that the module's
//   own gathers do not wait for it, and finished (its owners' sums in place, its copies released)
//   when a later moment finds it done, or when something needs it: a move of one of its chunks
//   (ChunkStore's move guard), a module that uses it again, room on the device, the end of the
//   micro-batch. In the warm-up reductions finish where they are queued;
// - after the warm-up, the groups the next moment of the trace uses are queued for gathering ahead,
//   unless they are gathered, have gradients this micro-batch or are being reduced. A queued
//   gather starts (its payloads allocated, its collective free to run) at once when the device has
//   room for it beside this moment's chunks, else when its moment comes, as without the queue.
// Each collective runs on the tier's communication stream (Note [communication stream] in
// pstar/tier/device_tier.h), after a mark the main thread takes once its inputs are in place: a
// gather's when it starts (this rank's part copied into its slot, the payloads allocated), a
// reduction's when it is queued (the gradients complete, the buffer allocated). So on a GPU a
// gather started ahead waits only for that, not for the module computing when its collective is
// issued, and from the mark to its finish the main thread leaves its buffers alone, as the CPU's
// real concurrency already demands. The scope is told every range the collective's work uses
// (CommStreamScope::uses: the parts, the reduction's gradients, its sum and its buffer), so that
// the tests' checking tier holds the main thread to this.
// Every rank queues the same collectives in the same order: what is queued and when depends on the
// trace and the groups' gradient counts only, never on timing or memory, which decide only when a
// gather may start and when the main thread waits. A wait for a collective starts every gather
// queued before it, so that no rank waits for a gather another rank has not started. A collective
// the main thread calls itself (a scalar all-reduce, an evaluation's gather) first waits for the
// queue to empty. The bytes sent are the same either way and so are the numbers: the same sums in
// the same order, on disjoint chunks. The host Adam of a group's owned chunk starts
// only once its reduction has finished here (reduced()). Where payloads are staged (Note [staged
// collectives]) each queued collective has host blocks of its own, filled from the device before
// it is queued (a gather: when it starts) and copied back when it is finished.
struct GatherStart;  // group_sync_queue.cpp

// A communication group: world_size consecutive chunks, one per rank (Note [chunk layout]).
struct Group {
  bool gathered = false;  // the remote chunks hold this step's parameters
  bool reduced = false;   // this micro-batch's gradients went to their owners
  int64_t tensors = 0, grads_seen = 0;
  // Note [collectives beside compute]: the worker's ticket for the group's queued collective (0:
  // none), which one it is, and its seconds (written by the worker, read after the wait).
  int64_t ticket = 0;
  bool gathering = false, reducing = false;
  double seconds = 0;
  std::shared_ptr<GatherStart> start;  // a queued gather that has not started yet
  // Note [staged collectives] beside compute: the host blocks of the queued collective's staged
  // parts (empty for a part not staged), the collective's own.
  std::vector<tier::Block> staged;
  // Note [flat gathers]: the gather's flat block, the bytes of it counted as the collectives'
  // (the slots no chunk holds), and whether a chunk holds a slot of it.
  tier::Block flat;
  int64_t flat_side_bytes = 0;
  bool flat_lent = false;
  bool grads_pending() const { return grads_seen > 0 && !reduced; }
};

// The communicator's figures for the step's metrics, and the bytes staged between device blocks
// and host blocks around the collectives (Note [staged collectives]).
struct SyncFigures {
  int64_t bytes_sent = 0;
  double seconds = 0;
  int64_t staged_bytes = 0;
  // Note [collectives beside compute]: the seconds the main thread waited for the communication
  // thread, and the gathers queued a moment ahead of their use.
  double wait_seconds = 0;
  int64_t gathers_ahead = 0;
};

// This rank's share of the chunks with `comm` (null: one rank owns every chunk).
chunk::Sharding sharding_of(const dist::Communicator* comm);

class GroupSync {
 public:
  // `comm` null: one rank. `beside_compute`: Note [collectives beside compute].
  // `reduce_buffer_cap`: Note [flat gathers] (plan::reduce_buffer_bytes).
  GroupSync(ChunkStore& store, dist::Communicator* comm, bool beside_compute,
            int64_t reduce_buffer_cap);
  ~GroupSync();
  GroupSync(const GroupSync&) = delete;
  GroupSync& operator=(const GroupSync&) = delete;

  bool active() const { return comm_ != nullptr; }
  bool beside_compute() const { return beside_; }
  // After registration: one group per world_size chunks, and each group's tensor count.
  void build_groups();
  int64_t num_groups() const { return static_cast<int64_t>(groups_.size()); }
  int64_t group_of(int64_t k) const { return store_.sharding().group_of(k); }
  // This rank's chunk of group g.
  int64_t own_chunk(int64_t g) const;
  // Gathered with nothing queued for it (Note [collectives beside compute]).
  bool gathered(int64_t g) const {
    const Group& group = groups_[static_cast<size_t>(g)];
    return group.gathered && group.ticket == 0;
  }
  // Group g's gradients were summed into the owners' chunks this micro-batch.
  bool reduced(int64_t g) const { return groups_[static_cast<size_t>(g)].reduced; }

  // Gives the remote chunks of group g their payloads and fills them from their owners. This
  // rank's chunk of the group is read: its queued Adam must be done. A gather queued ahead is
  // awaited and finished.
  void gather(int64_t g);
  // Note [collectives beside compute]: of `groups` (the next moment's), those a gather ahead would
  // be queued for: not gathered, no gradients this micro-batch, nothing queued. Empty without
  // beside_compute().
  std::vector<int64_t> ahead_candidates(const std::vector<int64_t>& groups) const;
  // Queues group g's gather ahead (one of ahead_candidates; the caller has awaited the host Adam
  // of its owned chunk), started now or at its use.
  void queue_ahead(int64_t g, bool start_now);
  // The device bytes group g's remote chunks take while gathered (with its flat block's, Note
  // [flat gathers]).
  int64_t remote_device_bytes(int64_t g) const;
  // Note [flat gathers]: the device bytes of the reduction's buffer while the backward runs.
  int64_t reduce_buffer_bytes() const;
  // Queues the reductions settle() found complete, behind the moment's gathers; `beside`: left to
  // run beside compute, else finished here.
  void issue_reductions(bool beside);
  bool reductions_pending() const;
  // Finishes every queued collective that has ended (without waiting).
  void finish_done();
  // Waits for every queued reduction and finishes it (its copies released): for room.
  void finish_reductions();
  // Waits until no started collective reads or writes chunk k's payloads (ChunkStore's move guard).
  void await_chunk(int64_t k);
  // Waits for every queued collective and finishes each: before a collective of the main thread.
  void drain();
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
  // Note [staged collectives]: whether `block` must travel through a block of comm_side_.
  bool staged(const tier::Block& block) const;
  // A tensor of the group is between its module's pre-hook and its end of use (a tied weight
  // waits in kCompute for its gradient through the whole backward).
  bool in_use(int64_t g) const;
  // Note [collectives beside compute].
  // Group g's staging block for `part` of `bytes` on comm_side_ (Note [staged collectives]),
  // counted in that side's budget until release_staged.
  tier::Block& staged_block(int64_t g, int64_t part, int64_t bytes);
  void release_staged(int64_t g);
  void queue_gather(int64_t g, bool start_now);
  void start_gather(int64_t g);  // its payloads, and the collective free to run
  void queue_reduce(int64_t g);
  void finish(int64_t g);  // waits for group g's queued collective and completes it here
  // Starts every gather queued up to `ticket`, then waits for it.
  void wait(int64_t ticket);
  void stop_queue();  // the queue's thread ends; gathers not started never run
  // The reduce-scatter of group g over `grads` (each part's gradient and its used elements, null
  // for a part with none), leaving this rank's sum in `own` (own_used elements of `type`).
  struct ReducePart {
    const void* grad = nullptr;
    int64_t used = 0;
  };
  void reduce_parts(int64_t size, const std::vector<ReducePart>& grads, c10::ScalarType type,
                    void* own, int64_t own_used);

  ChunkStore& store_;
  dist::Communicator* comm_;
  std::vector<Group> groups_;
  // reduce_parts' fp32 buffers for a host communicator: this rank's sum, and a bf16 or fp16
  // gradient part widened. Vectors outside LibTorch's allocator, which the emulated tier counts as
  // non-model memory (pstar/memory/cpu_counter.h).
  std::vector<float> reduced_, widened_;
  // Note [flat gathers]: whether the communicator takes flat buffers (a device one), and the
  // reduction's fp32 buffer then (plan::reduce_buffer_bytes), held for a micro-batch.
  const bool flat_;
  const int64_t reduce_buffer_cap_;
  int64_t largest_chunk_ = 0;
  tier::Block reduce_flat_;
  // Note [flat gathers]: the reduction's buffer, made (and counted) if it is not yet.
  void make_reduce_buffer();
  void release_reduce_buffer();
  // Gives back group g's flat block and the bytes counted for it.
  void release_flat(int64_t g);
  // Whether group g is gathered in place in its span (Note [split modules]) rather than through a
  // flat block, with a device communicator.
  bool gathers_in_span(int64_t g) const;
  void reduce_flat(int64_t size, const std::vector<ReducePart>& grads, c10::ScalarType type,
                   void* own, int64_t own_used);
  int64_t gathers_ = 0, reductions_ = 0, staged_bytes_ = 0;
  const bool beside_;  // Note [collectives beside compute]
  // Where the communicator's collectives read and write (Note [staged collectives]).
  const tier::Side comm_side_;
  std::vector<int64_t> complete_;  // groups settle() found complete, for issue_reductions
  double wait_seconds_ = 0;
  int64_t gathers_ahead_ = 0;
  // Last: its thread stops (and a running collective ends) before anything above goes.
  std::unique_ptr<core::OrderedWorker> worker_;
};

}  // namespace pstar::engine
