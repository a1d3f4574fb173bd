// GroupSync's queue (Note [collectives beside compute] in group_sync.h): the collectives a rank
// queues on its communication thread, when each starts, and what the main thread finishes once
// one has ended.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "group_sync.h"
#include "pstar/base/error.h"
#include "pstar/core/clock.h"
#include "pstar/dist/communicator.h"
#include "pstar/plan/memory_plan.h"

namespace pstar::engine {

using core::seconds_since;

// What a queued gather waits for before its collective: the payloads it fills (known once they
// are allocated), or word that it will never run.
struct GatherStart {
  std::mutex mutex;
  std::condition_variable opened;
  bool open = false, cancelled = false;
  std::vector<void*> parts;
  int64_t bytes = 0;
  std::shared_ptr<const tier::StreamMark> after;  // Note [communication stream]
};

namespace {

// Tensors over the reduction's pointers, all on one side: `where`.
auto side_view(c10::Device where) {
  return [where](const void* data, int64_t numel, c10::ScalarType dtype) {
    return torch::from_blob(const_cast<void*>(data), {numel},
                            torch::TensorOptions().dtype(dtype).device(where));
  };
}

// Runs one collective's work on this (the communication) thread: on the tier's communication
// stream, after `after`, and returns once it has completed (Note [communication stream]).
// `declare(scope)` tells the scope every range the work reads or writes; it runs only where the
// tier gives a scope.
template <typename Declare, typename Work>
void run_on_comm_stream(tier::DeviceTier& tier, const tier::StreamMark* after, Declare&& declare,
                        Work&& work) {
  const std::unique_ptr<tier::CommStreamScope> scope = tier.enter_comm_stream(after);
  if (scope) declare(*scope);
  work();
  if (scope) scope->finish();
}

}  // namespace

void GroupSync::stop_queue() {
  if (!worker_) return;
  for (Group& group : groups_) {
    if (!group.start) continue;
    const std::lock_guard<std::mutex> lock(group.start->mutex);
    group.start->open = group.start->cancelled = true;
    group.start->opened.notify_all();
  }
  worker_.reset();  // drops what has not begun and waits for what has
  for (int64_t g = 0; g < num_groups(); ++g) {
    release_staged(g);
    release_flat(g);
  }
  release_reduce_buffer();
}

void GroupSync::wait(int64_t ticket) {
  // A gather queued before `ticket` must start, or the other ranks would wait for this one's part.
  for (int64_t g = 0; g < num_groups(); ++g) {
    const Group& group = groups_[static_cast<size_t>(g)];
    if (group.start && group.ticket <= ticket) start_gather(g);
  }
  // Without beside_ every collective is waited for where it is issued: its time is comm_s, and
  // no compute was left to overlap.
  if (!beside_ || worker_->done(ticket)) {
    worker_->wait(ticket);  // rethrows a collective's failure
    return;
  }
  const auto begin = std::chrono::steady_clock::now();
  worker_->wait(ticket);
  wait_seconds_ += seconds_since(begin);
}

int64_t GroupSync::remote_device_bytes(int64_t g) const {
  int64_t bytes = 0;
  const int64_t world = store_.sharding().world_size;
  if (flat_ && !gathers_in_span(g)) {
    // Note [flat gathers]: the flat block, whose slots are the param payloads of the remote chunks
    // on the device, and those chunks' gradient payloads.
    const int64_t size = store_.size(group_chunk(g, 0));
    bytes = world * size * store_.format().elem_bytes;
    for (int64_t part = 0; part < world; ++part) {
      const Chunk& c = store_.chunks()[static_cast<size_t>(group_chunk(g, part))];
      if (c.remote && !c.host_only() && !store_.format().reuse) bytes += c.size * 4;
    }
    return bytes;
  }
  // Note [split modules]: a split module's span holds this rank's part as well.
  const bool split = store_.split_group(g);
  for (int64_t part = 0; part < world; ++part) {
    const int64_t k = group_chunk(g, part);
    const Chunk& c = store_.chunks()[static_cast<size_t>(k)];
    if ((c.remote || split) && !c.host_only()) bytes += store_.compute_bytes(k);
  }
  return bytes;
}

int64_t GroupSync::reduce_buffer_bytes() const {
  return flat_ ? plan::reduce_buffer_bytes(store_.sharding().world_size, largest_chunk_,
                                           reduce_buffer_cap_)
               : 0;
}

bool GroupSync::gathers_in_span(int64_t g) const {
  if (!store_.split_group(g)) return false;
  const Chunk& first = store_.chunks()[static_cast<size_t>(group_chunk(g, 0))];
  const tier::Side span_side = first.host_only() ? tier::Side::kHost : tier::Side::kDevice;
  return span_side == comm_side_ || store_.tier().host_addresses_device();
}

void GroupSync::release_flat(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (!group.flat) return;
  store_.add_side_bytes(comm_side_, -group.flat_side_bytes);
  group.flat.reset();
  group.flat_side_bytes = 0;
  group.flat_lent = false;
}

void GroupSync::make_reduce_buffer() {
  if (reduce_flat_) return;
  const int64_t bytes = reduce_buffer_bytes();
  reduce_flat_ = store_.tier().allocate_uninitialized(comm_side_, bytes);
  store_.add_side_bytes(comm_side_, bytes);
}

void GroupSync::release_reduce_buffer() {
  if (!reduce_flat_) return;
  store_.add_side_bytes(comm_side_, -reduce_flat_.bytes());
  reduce_flat_.reset();
}

tier::Block& GroupSync::staged_block(int64_t g, int64_t part, int64_t bytes) {
  Group& group = groups_[static_cast<size_t>(g)];
  group.staged.resize(static_cast<size_t>(store_.sharding().world_size));
  tier::Block& block = group.staged[static_cast<size_t>(part)];
  if (!block) {
    block = store_.tier().allocate_uninitialized(comm_side_, bytes);
    store_.add_side_bytes(comm_side_, bytes);
  }
  return block;
}

void GroupSync::release_staged(int64_t g) {
  for (tier::Block& block : groups_[static_cast<size_t>(g)].staged) {
    if (!block) continue;
    store_.add_side_bytes(comm_side_, -block.bytes());
    block.reset();
  }
  groups_[static_cast<size_t>(g)].staged.clear();
}

void GroupSync::queue_gather(int64_t g, bool start_now) {
  Group& group = groups_[static_cast<size_t>(g)];
  PSTAR_INTERNAL_ASSERT(group.ticket == 0 && !group.gathered, "group ", g, " queued twice");
  auto start = std::make_shared<GatherStart>();
  group.gathering = true;
  group.start = start;
  group.ticket = worker_->submit([this, start, &group] {
    std::vector<void*> parts;
    int64_t bytes = 0;
    std::shared_ptr<const tier::StreamMark> after;
    {
      std::unique_lock<std::mutex> lock(start->mutex);
      start->opened.wait(lock, [&] { return start->open; });
      if (start->cancelled) return;
      parts = start->parts;
      bytes = start->bytes;
      after = start->after;
    }
    const auto begin = std::chrono::steady_clock::now();
    run_on_comm_stream(
        store_.tier(), after.get(),
        [&](tier::CommStreamScope& scope) {
          for (const void* part : parts) scope.uses(part, bytes);
        },
        [&] { comm_->all_gather(parts, bytes); });
    group.seconds = seconds_since(begin);
  });
  if (start_now) start_gather(g);
}

void GroupSync::start_gather(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (!group.start) return;
  const int64_t world = store_.sharding().world_size;
  const int64_t bytes = store_.size(group_chunk(g, 0)) * store_.format().elem_bytes;
  std::vector<void*> parts;
  bool any_staged = false;
  store_.await_upload(own_chunk(g));  // this rank's part is read as it is now
  // Note [split modules]: a split module's parts are slots of its span, this rank's copied in
  // there by open_span; it is sent from its slot, so that the parts lie side by side and a device
  // communicator gathers them as one buffer (Note [device collectives]).
  const bool split = store_.split_group(g);
  if (split) store_.open_span(g);
  // Note [flat gathers]: with a device communicator, the parts go through the group's flat block
  // unless the span holds them side by side already.
  const bool through_flat = flat_ && !gathers_in_span(g);
  if (through_flat) {
    group.flat = store_.tier().allocate_uninitialized(comm_side_, world * bytes);
    group.flat_side_bytes = 0;
    group.flat_lent = false;
  }
  for (int64_t part = 0; part < world; ++part) {
    const int64_t k = group_chunk(g, part);
    Chunk& c = store_.chunk(k);
    if (through_flat) {
      void* slot = static_cast<char*>(group.flat.data()) + part * bytes;
      parts.push_back(slot);
      if (c.remote && !split && c.compute_place == comm_side_) {
        store_.allocate_remote(k, tier::Block(slot, bytes, comm_side_, nullptr));
        group.flat_lent = true;
        continue;
      }
      group.flat_side_bytes += bytes;
      if (c.remote) {
        if (!split) store_.allocate_remote(k);  // filled from its slot at finish
        continue;
      }
      // This rank's part, from its payload (its slot of the span, for a split module).
      tier::Block span_slot = split ? store_.span_slot(g, part, /*grad=*/false) : tier::Block();
      tier::Block into(slot, bytes, comm_side_, nullptr);
      store_.tier().copy(into, split ? span_slot : c.param, bytes);
      staged_bytes_ += bytes;
      any_staged = true;
      continue;
    }
    if (c.remote && !split) store_.allocate_remote(k);
    tier::Block slot = split ? store_.span_slot(g, part, /*grad=*/false) : tier::Block();
    tier::Block& payload = split ? slot : c.param;
    if (!staged(payload)) {
      parts.push_back(payload.data());
      continue;
    }
    // Note [staged collectives]: this rank's part goes out now, the others' come in at finish.
    tier::Block& host = staged_block(g, part, bytes);
    if (!c.remote) {
      store_.tier().copy(host, payload, bytes);
      staged_bytes_ += bytes;
      any_staged = true;
    }
    parts.push_back(host.data());
  }
  if (through_flat) store_.add_side_bytes(comm_side_, group.flat_side_bytes);
  if (any_staged) store_.tier().synchronize();
  store_.check_host();
  // Note [communication stream]: the parts are in place, the own one copied into its slot.
  std::shared_ptr<const tier::StreamMark> after = store_.tier().mark_compute();
  const std::shared_ptr<GatherStart> start = std::exchange(group.start, nullptr);
  const std::lock_guard<std::mutex> lock(start->mutex);
  start->parts = std::move(parts);
  start->bytes = bytes;
  start->after = std::move(after);
  start->open = true;
  start->opened.notify_all();
}

void GroupSync::queue_reduce(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  PSTAR_INTERNAL_ASSERT(group.ticket == 0 && !group.reduced, "group ", g, " reduced twice");
  const ChunkFormat& format = store_.format();
  const int64_t mine = own_chunk(g);
  const int64_t size = store_.size(mine);
  const int64_t grad_elem_bytes = format.reuse ? format.elem_bytes : 4;
  store_.await_upload(mine);  // its gradients are read and written as they have landed
  // Note [staged collectives]: a device-side gradient is read through a host block of the group's.
  // Note [split modules]: an open span holds every part's gradients, this rank's too.
  const bool span = store_.split_group(g) && store_.span(g).open();
  std::vector<ReducePart> grads;
  bool any_staged = false;
  for (int64_t part = 0; part < store_.sharding().world_size; ++part) {
    Chunk& c = store_.chunk(group_chunk(g, part));
    if (!c.param || c.used == 0) {
      grads.emplace_back();
      continue;
    }
    tier::Block slot = span ? store_.span_slot(g, part, !format.reuse) : tier::Block();
    tier::Block& block = span ? slot : format.reuse ? c.param : c.grad;
    if (!staged(block)) {
      grads.push_back(ReducePart{block.data(), c.used});
      continue;
    }
    tier::Block& host = staged_block(g, part, size * grad_elem_bytes);
    store_.tier().copy(host, block, c.used * grad_elem_bytes);
    staged_bytes_ += c.used * grad_elem_bytes;
    any_staged = true;
    grads.push_back(ReducePart{host.data(), c.used});
  }
  if (any_staged) store_.tier().synchronize();
  const Chunk& own = store_.chunk(mine);
  const int64_t own_used = own.used;
  const int64_t rank = store_.sharding().rank;
  // This rank's sum lands in its own part's host block when that part is staged.
  const bool own_staged = staged(format.reuse ? own.param : own.grad);
  void* out = own_staged ? staged_block(g, rank, size * grad_elem_bytes).data()
                         : const_cast<void*>(store_.grad_data(own));
  store_.check_host();
  const auto type = format.reuse ? format.dtype : torch::kFloat32;
  if (flat_) make_reduce_buffer();  // Note [flat gathers]
  // Note [communication stream]: the gradients are complete and the buffers allocated. The
  // reduction reads every part's gradients and writes this rank's sum (and the flat buffer).
  std::shared_ptr<const tier::StreamMark> after = store_.tier().mark_compute();
  group.reducing = true;
  group.ticket = worker_->submit([this, size, grads, type, out, own_used, after, &group] {
    const auto begin = std::chrono::steady_clock::now();
    const auto elem_bytes = static_cast<int64_t>(c10::elementSize(type));
    run_on_comm_stream(
        store_.tier(), after.get(),
        [&](tier::CommStreamScope& scope) {
          for (const ReducePart& p : grads)
            if (p.grad != nullptr) scope.uses(p.grad, p.used * elem_bytes);
          if (own_used > 0) scope.uses(out, own_used * elem_bytes);
          if (reduce_flat_) scope.uses(reduce_flat_.data(), reduce_flat_.bytes());
        },
        [&] { reduce_parts(size, grads, type, out, own_used); });
    group.seconds = seconds_since(begin);
  });
}

void GroupSync::reduce_flat(int64_t size, const std::vector<ReducePart>& grads,
                            c10::ScalarType type, void* own, int64_t own_used) {
  // Note [flat gathers]: every pointer here is on the device communicator's side.
  const auto view = side_view(store_.tier().device_of(comm_side_));
  const int64_t world = store_.sharding().world_size;
  const int64_t rank = store_.sharding().rank;
  const int64_t piece = plan::reduce_piece_elements(world, largest_chunk_, reduce_buffer_cap_);
  auto* flat = static_cast<float*>(reduce_flat_.data());
  PSTAR_INTERNAL_ASSERT(reduce_flat_.bytes() >= world * piece * 4,
                        "the reduction's buffer is smaller than its pieces");
  // Elements [begin, begin + len) of every part, side by side in the buffer's first world * len.
  for (int64_t begin = 0; begin < size; begin += piece) {
    const int64_t len = std::min(piece, size - begin);
    for (int64_t part = 0; part < world; ++part) {
      const ReducePart& p = grads[static_cast<size_t>(part)];
      at::Tensor slot = view(flat + part * len, len, torch::kFloat32);
      const int64_t filled =
          p.grad != nullptr ? std::clamp<int64_t>(p.used - begin, 0, len) : int64_t{0};
      // A widening copy: no temporary, and the same bits as adding the gradient to zero.
      if (filled > 0) {
        const auto* from = static_cast<const char*>(p.grad) + begin * c10::elementSize(type);
        slot.narrow(0, 0, filled).copy_(view(from, filled, type));
      }
      if (filled < len) slot.narrow(0, filled, len - filled).zero_();
    }
    comm_->reduce_scatter_flat(flat, len);
    const int64_t out = std::clamp<int64_t>(own_used - begin, 0, len);
    if (out > 0) {
      auto* to = static_cast<char*>(own) + begin * c10::elementSize(type);
      view(to, out, type).copy_(view(flat + rank * len, out, torch::kFloat32));
    }
  }
}

void GroupSync::reduce_parts(int64_t size, const std::vector<ReducePart>& grads,
                             c10::ScalarType type, void* own, int64_t own_used) {
  torch::NoGradGuard no_grad;
  if (flat_) {
    reduce_flat(size, grads, type, own, own_used);
    return;
  }
  // Every pointer here is on the communicator's side (Note [staged collectives]).
  const auto view = side_view(store_.tier().device_of(comm_side_));
  reduced_.resize(static_cast<size_t>(size));
  float* reduced = reduced_.data();
  // A bf16 or fp16 gradient is widened into a buffer of this class's own first: LibTorch would
  // allocate a temporary for the mixed-type add, which the emulated tier counts as non-model
  // memory of whatever moment the main thread is in.
  if (type != torch::kFloat32) widened_.resize(static_cast<size_t>(size));
  float* widened = type != torch::kFloat32 ? widened_.data() : nullptr;
  comm_->reduce_scatter(
      size,
      [&](int64_t part, float* acc) {
        const ReducePart& p = grads[static_cast<size_t>(part)];
        if (p.grad == nullptr) return;  // never gathered: no gradient here
        auto grad = view(p.grad, p.used, type);
        if (type != torch::kFloat32) {
          auto wide = view(widened, p.used, torch::kFloat32);
          wide.copy_(grad);
          grad = wide;
        }
        view(acc, p.used, torch::kFloat32).add_(grad);
      },
      reduced);
  if (own_used > 0) view(own, own_used, type).copy_(view(reduced, own_used, torch::kFloat32));
}

void GroupSync::finish(int64_t g) {
  Group& group = groups_[static_cast<size_t>(g)];
  if (group.ticket == 0) return;
  wait(group.ticket);
  group.ticket = 0;
  const int64_t world = store_.sharding().world_size;
  if (group.gathering) {
    group.gathering = false;
    const int64_t param_bytes = store_.size(group_chunk(g, 0)) * store_.format().elem_bytes;
    store_.record(group_chunk(g, 0), formats::ChunkEventKind::kGather, (world - 1) * param_bytes,
                  group.seconds);
    bool any_staged = false;
    for (int64_t part = 0; part < world; ++part) {
      Chunk& c = store_.chunk(group_chunk(g, part));
      if (group.flat) {
        // Note [flat gathers]: a remote part that does not hold its slot is copied out of it.
        char* slot = static_cast<char*>(group.flat.data()) + part * param_bytes;
        if (!c.remote || c.param.data() == slot) continue;
        store_.tier().copy(c.param, tier::Block(slot, param_bytes, comm_side_, nullptr),
                           param_bytes);
      } else {
        if (!c.remote || !staged(c.param)) continue;
        store_.tier().copy(c.param, group.staged[static_cast<size_t>(part)], param_bytes);
      }
      staged_bytes_ += param_bytes;
      any_staged = true;
    }
    if (any_staged) store_.tier().synchronize();  // the copies in have read the blocks
    release_staged(g);
    if (!group.flat_lent) release_flat(g);  // else it goes with the group (release)
    if (store_.split_group(g)) {
      store_.repoint_span(g);
    } else {
      for (int64_t part = 0; part < world; ++part) {
        const int64_t k = group_chunk(g, part);
        if (store_.chunk(k).remote) store_.repoint(k);
      }
    }
    group.gathered = true;
    ++gathers_;
    return;
  }
  PSTAR_INTERNAL_ASSERT(group.reducing, "group ", g, " has a ticket and no collective");
  const int64_t rank = store_.sharding().rank;
  if (!group.staged.empty() && group.staged[static_cast<size_t>(rank)]) {
    // Note [staged collectives]: this rank's sum goes back to its device-side gradient.
    const ChunkFormat& format = store_.format();
    Chunk& own = store_.chunk(own_chunk(g));
    const int64_t bytes = own.used * (format.reuse ? format.elem_bytes : 4);
    store_.tier().copy(format.reuse ? own.param : own.grad, group.staged[static_cast<size_t>(rank)],
                       bytes);
    store_.tier().synchronize();
    staged_bytes_ += bytes;
  }
  release_staged(g);
  group.reducing = false;
  group.reduced = true;
  ++reductions_;
  store_.record(group_chunk(g, 0), formats::ChunkEventKind::kReduce,
                (world - 1) * store_.size(own_chunk(g)) * 4, group.seconds);
  // As settle() does after a reduction: the copies of the other ranks' chunks are stale.
  if (!in_use(g)) release(g);
}

void GroupSync::finish_done() {
  if (!worker_) return;
  for (int64_t g = 0; g < num_groups(); ++g) {
    const Group& group = groups_[static_cast<size_t>(g)];
    if (group.ticket != 0 && !group.start && worker_->done(group.ticket)) finish(g);
  }
}

void GroupSync::issue_reductions(bool beside) {
  for (int64_t g : complete_) {
    queue_reduce(g);
    if (!beside) finish(g);
  }
  complete_.clear();
}

bool GroupSync::reductions_pending() const {
  return std::any_of(groups_.begin(), groups_.end(),
                     [](const Group& group) { return group.reducing; });
}

void GroupSync::finish_reductions() {
  for (int64_t g = 0; g < num_groups(); ++g)
    if (groups_[static_cast<size_t>(g)].reducing) finish(g);
}

std::vector<int64_t> GroupSync::ahead_candidates(const std::vector<int64_t>& groups) const {
  std::vector<int64_t> out;
  if (!beside_) return out;
  for (int64_t g : groups) {
    const Group& group = groups_[static_cast<size_t>(g)];
    if (!group.gathered && group.ticket == 0 && group.grads_seen == 0 && !group.reduced)
      out.push_back(g);
  }
  return out;
}

void GroupSync::queue_ahead(int64_t g, bool start_now) {
  queue_gather(g, start_now);
  ++gathers_ahead_;
}

void GroupSync::await_chunk(int64_t k) {
  if (!worker_) return;
  const Group& group = groups_[static_cast<size_t>(group_of(k))];
  // A gather not started yet reads nothing: it takes the payloads as they are when it starts.
  if (group.ticket != 0 && !group.start) wait(group.ticket);
}

void GroupSync::drain() {
  if (!worker_) return;
  issue_reductions(/*beside=*/true);
  std::vector<std::pair<int64_t, int64_t>> queued;  // (ticket, group): finished in queue order
  for (int64_t g = 0; g < num_groups(); ++g) {
    const int64_t ticket = groups_[static_cast<size_t>(g)].ticket;
    if (ticket != 0) queued.emplace_back(ticket, g);
  }
  std::sort(queued.begin(), queued.end());
  for (const auto& [ticket, g] : queued) finish(g);
}

}  // namespace pstar::engine
