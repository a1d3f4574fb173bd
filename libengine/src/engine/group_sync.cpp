#include "group_sync.h"

#include <chrono>

#include "pstar/base/error.h"
#include "pstar/core/clock.h"
#include "pstar/dist/communicator.h"

namespace pstar::engine {

using core::seconds_since;

chunk::Sharding sharding_of(const dist::Communicator* comm) {
  if (comm == nullptr) return chunk::Sharding{};
  return chunk::Sharding{comm->rank(), comm->world_size()};
}

GroupSync::GroupSync(ChunkStore& store, dist::Communicator* comm) : store_(store), comm_(comm) {}

void GroupSync::build_groups() {
  const chunk::Sharding& sharding = store_.sharding();
  groups_.assign(static_cast<size_t>(store_.num_chunks() / sharding.world_size), Group{});
  for (const auto& t : store_.tensors()) ++groups_[static_cast<size_t>(group_of(t.chunk))].tensors;
}

int64_t GroupSync::group_chunk(int64_t g, int64_t part) const {
  return store_.sharding().first_of_group(g) + part;
}

int64_t GroupSync::own_chunk(int64_t g) const { return group_chunk(g, store_.sharding().rank); }

void GroupSync::gather(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (group.gathered) return;
  const chunk::Sharding& sharding = store_.sharding();
  // A group's chunks are of one size (several sizes only with one rank, plan::plan_layout).
  const int64_t param_bytes = store_.size(group_chunk(g, 0)) * store_.format().elem_bytes;
  std::vector<void*> parts;
  for (int64_t part = 0; part < sharding.world_size; ++part) {
    const int64_t k = group_chunk(g, part);
    if (store_.chunk(k).remote) store_.allocate_remote(k);
    parts.push_back(store_.chunk(k).param.data());
  }
  const auto begin = std::chrono::steady_clock::now();
  comm_->all_gather(parts, param_bytes);
  store_.record(group_chunk(g, 0), formats::ChunkEventKind::kGather,
                (sharding.world_size - 1) * param_bytes, seconds_since(begin));
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
  for (int64_t g = 0; g < num_groups(); ++g) release(g);
}

void GroupSync::reduce(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (group.reduced) return;
  const chunk::Sharding& sharding = store_.sharding();
  const ChunkFormat& format = store_.format();
  const int64_t mine = own_chunk(g);
  const int64_t size = store_.size(mine);
  reduced_.resize(static_cast<size_t>(size));
  const auto begin = std::chrono::steady_clock::now();
  comm_->reduce_scatter(
      size,
      [&](int64_t part, float* acc) {
        const Chunk& c = store_.chunk(group_chunk(g, part));
        if (!c.param || c.used == 0) return;  // never gathered: no gradient here
        auto dst = torch::from_blob(acc, {c.used}, torch::kFloat32);
        const auto type = format.reuse ? format.dtype : torch::kFloat32;
        dst.add_(
            torch::from_blob(const_cast<void*>(store_.grad_data(c)), {c.used}, torch::dtype(type)));
      },
      reduced_.data());
  const Chunk& own = store_.chunk(mine);
  if (own.used > 0) {
    torch::NoGradGuard no_grad;
    auto src = torch::from_blob(reduced_.data(), {own.used}, torch::kFloat32);
    torch::from_blob(const_cast<void*>(store_.grad_data(own)), {own.used},
                     torch::dtype(format.reuse ? format.dtype : torch::kFloat32))
        .copy_(src);
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
  for (int64_t g = 0; g < num_groups(); ++g) {
    const Group& group = groups_[static_cast<size_t>(g)];
    if (group.grads_pending() && group.grads_seen == group.tensors && !in_use(g)) {
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
  // Every group's gradients go to their owners before the next micro-batch or the optimizer.
  for (int64_t g = 0; g < num_groups(); ++g) {
    reduce(g);
    release(g);
  }
  for (auto& g : groups_) g = Group{false, false, g.tensors, 0};
  for (auto& t : store_.tensors()) t.grad_seen = false;
}

double GroupSync::all_reduce_sum(double value) {
  return comm_ != nullptr ? comm_->all_reduce_sum(value) : value;
}

void GroupSync::begin_step() { gathers_ = reductions_ = 0; }

SyncFigures GroupSync::take_figures() {
  const dist::CommStats stats = comm_->take_stats();
  return SyncFigures{stats.bytes_sent, stats.seconds};
}

}  // namespace pstar::engine
