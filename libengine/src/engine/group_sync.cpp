#include "group_sync.h"

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

GroupSync::GroupSync(ChunkStore& store, dist::Communicator* comm, bool beside_compute)
    : store_(store), comm_(comm) {
  if (comm_ != nullptr && beside_compute) worker_ = std::make_unique<core::OrderedWorker>();
}

GroupSync::~GroupSync() {
  stop_queue();  // a collective still running ends before the payloads it reads go
  for (const tier::Block& block : staging_)
    if (block) store_.add_host_bytes(-block.bytes());
}

void GroupSync::build_groups() {
  const chunk::Sharding& sharding = store_.sharding();
  groups_.clear();
  groups_.resize(static_cast<size_t>(store_.num_chunks() / sharding.world_size));
  for (const auto& t : store_.tensors()) ++groups_[static_cast<size_t>(group_of(t.chunk))].tensors;
}

int64_t GroupSync::group_chunk(int64_t g, int64_t part) const {
  return store_.sharding().first_of_group(g) + part;
}

int64_t GroupSync::own_chunk(int64_t g) const { return group_chunk(g, store_.sharding().rank); }

bool GroupSync::staged(const tier::Block& block) const {
  return block.side() == tier::Side::kDevice && !store_.tier().host_addresses_device();
}

tier::Block& GroupSync::staging(int64_t part, int64_t bytes) {
  staging_.resize(static_cast<size_t>(store_.sharding().world_size));
  tier::Block& block = staging_[static_cast<size_t>(part)];
  if (block.bytes() < bytes) {
    if (block) store_.add_host_bytes(-block.bytes());
    block.reset();
    block = store_.tier().allocate_uninitialized(tier::Side::kHost, bytes);
    store_.add_host_bytes(bytes);
    store_.check_host();
  }
  return block;
}

void GroupSync::gather(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (worker_) {
    // Note [collectives beside compute]: a gather queued ahead finishes; a reduction still
    // running finishes first (and releases the group, as settle would have).
    finish(g);
    if (group.gathered) return;
    queue_gather(g, /*start_now=*/true);
    finish(g);
    return;
  }
  if (group.gathered) return;
  const chunk::Sharding& sharding = store_.sharding();
  // A group's chunks are of one size (several sizes only with one rank, plan::plan_layout).
  const int64_t param_bytes = store_.size(group_chunk(g, 0)) * store_.format().elem_bytes;
  tier::DeviceTier& tier = store_.tier();
  std::vector<void*> parts;
  bool any_staged = false;
  for (int64_t part = 0; part < sharding.world_size; ++part) {
    const int64_t k = group_chunk(g, part);
    if (store_.chunk(k).remote)
      store_.allocate_remote(k);
    else
      store_.await_upload(k);  // copied ahead for this moment (Note [prefetch]): sent as landed
    tier::Block& payload = store_.chunk(k).param;
    if (!staged(payload)) {
      parts.push_back(payload.data());
      continue;
    }
    // Note [staged collectives]: this rank's part out to the host, the others in afterwards.
    tier::Block& host = staging(part, param_bytes);
    if (!store_.chunk(k).remote) {
      tier.copy(host, payload, param_bytes);
      staged_bytes_ += param_bytes;
    }
    parts.push_back(host.data());
    any_staged = true;
  }
  if (any_staged) tier.synchronize();
  const auto begin = std::chrono::steady_clock::now();
  comm_->all_gather(parts, param_bytes);
  store_.record(group_chunk(g, 0), formats::ChunkEventKind::kGather,
                (sharding.world_size - 1) * param_bytes, seconds_since(begin));
  for (int64_t part = 0; part < sharding.world_size; ++part) {
    Chunk& c = store_.chunk(group_chunk(g, part));
    if (c.remote && staged(c.param)) {
      tier.copy(c.param, staging_[static_cast<size_t>(part)], param_bytes);
      staged_bytes_ += param_bytes;
    }
  }
  if (any_staged) tier.synchronize();  // the copies in have read the staging blocks
  for (int64_t part = 0; part < sharding.world_size; ++part) {
    const int64_t k = group_chunk(g, part);
    if (store_.chunk(k).remote) store_.repoint(k);
  }
  group.gathered = true;
  ++gathers_;
  store_.check_host();
}

void GroupSync::release(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (!group.gathered) return;
  PSTAR_INTERNAL_ASSERT(!group.grads_pending(), "releasing group ", g, " before its reduction");
  for (int64_t part = 0; part < store_.sharding().world_size; ++part) {
    const int64_t k = group_chunk(g, part);
    if (store_.chunk(k).remote) store_.free_remote(k);
  }
  group.gathered = false;
}

void GroupSync::release_all() {
  drain();
  for (int64_t g = 0; g < num_groups(); ++g) release(g);
}

void GroupSync::reduce(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (group.reduced) return;
  if (worker_) {
    if (group.ticket == 0) queue_reduce(g);
    finish(g);
    return;
  }
  const chunk::Sharding& sharding = store_.sharding();
  const ChunkFormat& format = store_.format();
  const int64_t mine = own_chunk(g);
  const int64_t size = store_.size(mine);
  reduced_.resize(static_cast<size_t>(size));
  tier::DeviceTier& tier = store_.tier();
  const auto type = format.reuse ? format.dtype : torch::kFloat32;
  const int64_t grad_elem_bytes = format.reuse ? format.elem_bytes : 4;
  // The gradient payload of chunk c (under param/grad reuse, its parameter payload).
  const auto grad_block = [&](Chunk& c) -> tier::Block& { return format.reuse ? c.param : c.grad; };
  store_.await_upload(mine);  // its gradients are read and written as they have landed
  const auto begin = std::chrono::steady_clock::now();
  comm_->reduce_scatter(
      size,
      [&](int64_t part, float* acc) {
        Chunk& c = store_.chunk(group_chunk(g, part));
        if (!c.param || c.used == 0) return;  // never gathered: no gradient here
        const void* grad = store_.grad_data(c);
        if (staged(grad_block(c))) {  // Note [staged collectives]
          tier::Block& host = staging(part, size * grad_elem_bytes);
          tier.copy(host, grad_block(c), c.used * grad_elem_bytes);
          tier.synchronize();
          staged_bytes_ += c.used * grad_elem_bytes;
          grad = host.data();
        }
        auto dst = torch::from_blob(acc, {c.used}, torch::kFloat32);
        dst.add_(torch::from_blob(const_cast<void*>(grad), {c.used}, torch::dtype(type)));
      },
      reduced_.data());
  Chunk& own = store_.chunk(mine);
  if (own.used > 0) {
    torch::NoGradGuard no_grad;
    auto src = torch::from_blob(reduced_.data(), {own.used}, torch::kFloat32);
    const bool staged_own = staged(grad_block(own));
    void* out = staged_own ? staging(store_.sharding().rank, size * grad_elem_bytes).data()
                           : const_cast<void*>(store_.grad_data(own));
    torch::from_blob(out, {own.used}, torch::dtype(type)).copy_(src);
    if (staged_own) {
      tier.copy(grad_block(own), staging_[static_cast<size_t>(store_.sharding().rank)],
                own.used * grad_elem_bytes);
      tier.synchronize();
      staged_bytes_ += own.used * grad_elem_bytes;
    }
  }
  group.reduced = true;
  ++reductions_;
  store_.record(group_chunk(g, 0), formats::ChunkEventKind::kReduce,
                (sharding.world_size - 1) * size * 4, seconds_since(begin));
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
      if (worker_) {
        complete_.push_back(g);  // queued after this moment's gathers (issue_reductions)
        continue;
      }
      reduce(g);
      // Gradients are summed; in reuse mode the slots now hold them, so the copies of the
      // other ranks' chunks are stale: drop them.
      release(g);
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
