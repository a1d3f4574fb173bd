#include "group_sync.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "pstar/base/error.h"
#include "pstar/core/clock.h"
#include "pstar/dist/communicator.h"

namespace pstar::engine {

using core::seconds_since;

chunk::Sharding sharding_of(const dist::Communicator* comm) {
  if (comm == nullptr) return chunk::Sharding{};
  return chunk::Sharding{comm->rank(), comm->world_size()};
}

GroupSync::GroupSync(ChunkStore& store, dist::Communicator* comm, bool beside_compute,
                     int64_t reduce_buffer_cap)
    : store_(store),
      comm_(comm),
      flat_(comm != nullptr && comm->on_device()),
      reduce_buffer_cap_(reduce_buffer_cap),
      beside_(comm != nullptr && beside_compute),
      comm_side_(comm != nullptr && comm->on_device() ? tier::Side::kDevice : tier::Side::kHost) {
  if (comm_ != nullptr) worker_ = std::make_unique<core::OrderedWorker>();
}

GroupSync::~GroupSync() {
  stop_queue();  // a collective still running ends before the payloads it reads go
}

void GroupSync::build_groups() {
  const chunk::Sharding& sharding = store_.sharding();
  groups_.clear();
  groups_.resize(static_cast<size_t>(store_.num_chunks() / sharding.world_size));
  for (const auto& t : store_.tensors()) ++groups_[static_cast<size_t>(group_of(t.chunk))].tensors;
  largest_chunk_ = 0;
  for (const Chunk& c : store_.chunks()) largest_chunk_ = std::max(largest_chunk_, c.size);
}

int64_t GroupSync::group_chunk(int64_t g, int64_t part) const {
  return store_.sharding().first_of_group(g) + part;
}

int64_t GroupSync::own_chunk(int64_t g) const { return group_chunk(g, store_.sharding().rank); }

bool GroupSync::staged(const tier::Block& block) const {
  return block.side() != comm_side_ && !store_.tier().host_addresses_device();
}

void GroupSync::gather(int64_t g) {
  // Through the queue (Note [collectives beside compute]), after what is already in it: a gather
  // queued ahead finishes; a reduction still running finishes first (and releases the group, as
  // settle would have).
  finish(g);
  if (groups_[static_cast<size_t>(g)].gathered) return;
  queue_gather(g, /*start_now=*/true);
  finish(g);
}

void GroupSync::release(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (!group.gathered) return;
  PSTAR_INTERNAL_ASSERT(!group.grads_pending(), "releasing group ", g, " before its reduction");
  if (store_.split_group(g)) {
    store_.close_span(g);  // Note [split modules]: the other ranks' parts are slots of the span
    group.gathered = false;
    return;
  }
  for (int64_t part = 0; part < store_.sharding().world_size; ++part) {
    const int64_t k = group_chunk(g, part);
    if (store_.chunk(k).remote) store_.free_remote(k);
  }
  release_flat(g);  // Note [flat gathers]: after the chunks that held its slots
  group.gathered = false;
}

void GroupSync::release_all() {
  drain();
  for (int64_t g = 0; g < num_groups(); ++g) release(g);
}

void GroupSync::reduce(int64_t g) {
  const Group& group = groups_[static_cast<size_t>(g)];
  if (group.reduced) return;
  if (group.ticket == 0) queue_reduce(g);
  finish(g);
}

bool GroupSync::in_use(int64_t g) const {
  for (int64_t part = 0; part < store_.sharding().world_size; ++part)
    if (store_.chunks()[static_cast<size_t>(group_chunk(g, part))].compute_count > 0) return true;
  return false;
}

void GroupSync::settle(const std::vector<bool>& keep) {
  if (comm_ == nullptr) return;
  finish_done();
  for (int64_t g = 0; g < num_groups(); ++g) {
    const Group& group = groups_[static_cast<size_t>(g)];
    if (group.grads_pending() && group.grads_seen == group.tensors && !in_use(g) &&
        !group.reducing) {
      if (beside_) {
        complete_.push_back(g);  // queued after this moment's gathers (issue_reductions)
        continue;
      }
      // Gradients are summed; in reuse mode the slots now hold them, so the copies of the other
      // ranks' chunks are stale: finishing the reduction drops them.
      reduce(g);
    }
  }
  for (int64_t g = 0; g < num_groups(); ++g) {
    const Group& group = groups_[static_cast<size_t>(g)];
    if (group.gathered && !group.grads_pending() && !keep[static_cast<size_t>(g)] && !in_use(g))
      release(g);
  }
}

void GroupSync::grad_arrived(int64_t id) {
  ManagedTensor& t = store_.tensors()[static_cast<size_t>(id)];
  if (t.grad_seen) return;
  t.grad_seen = true;
  ++groups_[static_cast<size_t>(group_of(t.chunk))].grads_seen;
}

void GroupSync::end_micro_batch() {
  if (comm_ == nullptr) return;
  drain();
  // Every group's gradients go to their owners before the next micro-batch or the optimizer.
  for (int64_t g = 0; g < num_groups(); ++g) {
    reduce(g);
    release(g);
  }
  release_reduce_buffer();  // Note [flat gathers]: every reduction of the micro-batch is done
  for (auto& g : groups_) {
    Group fresh;
    fresh.tensors = g.tensors;
    g = std::move(fresh);
  }
  for (auto& t : store_.tensors()) t.grad_seen = false;
}

double GroupSync::all_reduce_sum(double value) {
  if (comm_ == nullptr) return value;
  drain();
  return comm_->all_reduce_sum(value);
}

void GroupSync::begin_step() { gathers_ = reductions_ = 0; }

SyncFigures GroupSync::take_figures() {
  drain();
  const dist::CommStats stats = comm_->take_stats();
  SyncFigures figures{stats.bytes_sent, stats.seconds, std::exchange(staged_bytes_, 0)};
  figures.wait_seconds = std::exchange(wait_seconds_, 0.0);
  figures.gathers_ahead = std::exchange(gathers_ahead_, 0);
  return figures;
}

}  // namespace pstar::engine
