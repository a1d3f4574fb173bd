#include "gradients.h"

#include <vector>

#include "pstar/base/error.h"

namespace pstar::engine {

void Gradients::arrive(int64_t id) {
  ManagedTensor& t = store_.tensors()[static_cast<size_t>(id)];
  // One accumulation per tensor and micro-batch, of every use's gradient summed (Note [one
  // accumulator per tensor]): a second one would find the slot holding the first gradient, which
  // zeroing would lose, and the chunk counted complete before it was.
  PSTAR_INTERNAL_ASSERT(!t.grad_arrived, "a second gradient accumulation for ", t.name,
                        " in one micro-batch: its uses fed two accumulators (Note [one accumulator "
                        "per tensor])");
  if (store_.format().reuse) {
    torch::NoGradGuard no_grad;
    store_.param_view(t).zero_();
  }
  store_.set_state(t, TensorState::kHoldAfterBwd);
  t.grad_arrived = true;
  // Note [split modules]: a split module's tensor is in every part of its group.
  const int64_t parts = t.split ? store_.sharding().world_size : 1;
  for (int64_t part = 0; part < parts; ++part) --store_.chunk(t.chunk + part).grads_missing;
}

void Gradients::reset_arrivals() {
  for (Chunk& c : store_.chunks()) c.grads_missing = static_cast<int64_t>(c.tensors.size());
  for (ManagedTensor& t : store_.tensors()) t.grad_arrived = false;
}

void Gradients::settle_micro_batch(bool host_touched) {
  // Host code below may touch payloads (zeroing a host slot, Gloo's buffers): queued copies finish
  // first. Only then: a whole-device synchronisation every micro-batch would stall the GPU's queue
  // for nothing (issue 20, item 7), and device-side slots are zeroed on the compute stream, in
  // order with the copies.
  const bool reuse = store_.format().reuse;
  // The slot that must read as zero: the tensor's view where it has one; for a split module's
  // tensor whose span is closed, this rank's piece in its own part, which the reduction then reads
  // (Note [split modules]).
  const auto slot = [this](const ManagedTensor& t) -> const Block* {
    if (const Block* block = store_.compute_block(t)) return block;
    if (!t.split) return nullptr;
    const OwnedPiece piece = store_.owned_piece(t);
    return piece.numel() > 0 ? &store_.chunk(piece.chunk).param : nullptr;
  };
  std::vector<ManagedTensor*> gradless;
  for (auto& t : store_.tensors()) {
    if (t.state != TensorState::kCompute && t.state != TensorState::kHoldAfterFwd) continue;
    gradless.push_back(&t);
    const Block* block = slot(t);
    if (reuse && block != nullptr && block->side() == Place::kHost) host_touched = true;
  }
  if (host_touched) store_.synchronize();
  torch::NoGradGuard no_grad;
  for (ManagedTensor* t : gradless) {
    if (reuse && store_.compute_block(*t) != nullptr) {
      store_.param_view(*t).zero_();
    } else if (reuse && slot(*t) != nullptr) {
      const OwnedPiece piece = store_.owned_piece(*t);
      store_
          .view(store_.chunk(piece.chunk).param, store_.format().dtype, piece.offset,
                {piece.numel()})
          .zero_();
    }
    store_.set_state(*t, TensorState::kHoldAfterBwd);
  }
}

double Gradients::sq_sum() {
  // The device side's sums first, all queued and waited for once, while the evictions the
  // optimizer moment queued are still under way; then the host side's, each waiting only for its
  // own chunk's copy.
  const auto& chunks = store_.chunks();
  std::vector<double> sums(chunks.size(), 0.0);
  for (Place side : {Place::kDevice, Place::kHost}) {
    std::vector<size_t> summed;
    std::vector<tier::DeviceTier::GradRef> grads;
    for (size_t k = 0; k < chunks.size(); ++k) {
      const Chunk& c = chunks[k];
      if (c.remote || c.compute_place != side) continue;
      // An early chunk's sum came from the worker, by the same function on the same bytes.
      if (c.adam.early()) {
        sums[k] = c.adam.early_sq;
        continue;
      }
      summed.push_back(k);
      grads.push_back(tier::DeviceTier::GradRef{store_.grad_data(c), store_.grad_type(), c.used});
    }
    if (grads.empty()) continue;
    std::vector<double> out(grads.size());
    store_.tier().grad_sq_sums(side, grads, out.data());
    for (size_t i = 0; i < summed.size(); ++i) sums[summed[i]] = out[i];
  }
  double sum = 0;
  for (double part : sums) sum += part;
  return sum;
}

void Gradients::end_step(bool updated) {
  if (!store_.format().reuse) {
    // The worker zeroes the gradients of the chunks whose Adam it runs.
    for (Chunk& c : store_.chunks())
      if (!c.remote && !c.adam.queued()) store_.tier().zero(c.grad, c.used * 4);
  } else if (!updated) {
    // A skipped update (fp16 overflow) leaves gradients in the parameter slots: restore the
    // parameters from the masters (Note [param/grad reuse]), with LibTorch on host payloads too.
    // Chunk by chunk, over the elements its tensors hold: a split module's tensors lie in pieces
    // (Note [split modules]), and the padding stays zero either way.
    store_.synchronize();
    torch::NoGradGuard no_grad;
    const ChunkFormat& f = store_.format();
    for (int64_t k = 0; k < store_.num_chunks(); ++k) {
      const Chunk& c = store_.chunk(k);
      if (c.remote || c.used == 0) continue;
      store_.stage_optimizer(k, /*write=*/false);  // an NVMe chunk's master is read through
      store_.view(c.param, f.dtype, 0, {c.used})
          .copy_(store_.view(c.master, torch::kFloat32, 0, {c.used}));
    }
    store_.unstage_optimizer();
  }
}

}  // namespace pstar::engine
