#include "speculation.h"

#include <algorithm>
#include <utility>

#include "pstar/base/error.h"

namespace pstar::engine {

SpeculationSlots::~SpeculationSlots() {
  if (!slots_.empty()) store_.add_host_bytes(-bytes());
}

// Slots hold ordinary chunks: a module's own oversized chunk is not speculated.
int64_t SpeculationSlots::slot_bytes() const {
  const ChunkFormat& f = store_.format();
  return f.chunk_size * (f.elem_bytes + (f.fp32 ? 0 : 4) + 8);
}

int64_t SpeculationSlots::provide(int64_t wanted, int64_t reserve) {
  const ChunkFormat& f = store_.format();
  const int64_t size = f.chunk_size;
  while (this->size() < wanted) {
    // What the store holds and what the tier's pools hold beside it both count (check_host_pools),
    // and `reserve` is kept free beside them.
    const int64_t held =
        std::max(store_.host_bytes().current, store_.tier().host_memory().current());
    if (store_.host_budget() - held - reserve < slot_bytes()) break;
    Slot s;
    // The parameters become a chunk's compute payload, which moves: the memory copies take.
    // Zeroed, which faults the pages in now, over every intra-op thread (Note [parallel first
    // touch]), rather than in the first speculated updates on the worker (on the development
    // machine the first speculating step's host Adam took 40 times a steady one's), and leaves a
    // committed chunk's padding zero as the chunk's own was.
    s.param = store_.allocate_payload(Place::kHost, size * f.elem_bytes, /*moves=*/true,
                                      /*zeroed=*/true);
    if (!f.fp32) s.master = store_.allocate_payload(Place::kHost, size * 4, /*moves=*/false, true);
    s.exp_avg = store_.allocate_payload(Place::kHost, size * 4, /*moves=*/false, true);
    s.exp_avg_sq = store_.allocate_payload(Place::kHost, size * 4, /*moves=*/false, true);
    slots_.push_back(std::move(s));
    store_.add_host_bytes(slot_bytes());
  }
  return this->size();
}

int SpeculationSlots::take() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].taken) continue;
    slots_[i].taken = true;
    return static_cast<int>(i);
  }
  return -1;
}

void SpeculationSlots::give_back(int slot) {
  PSTAR_INTERNAL_ASSERT(slots_[static_cast<size_t>(slot)].taken, "slot ", slot, " is free");
  slots_[static_cast<size_t>(slot)].taken = false;
}

optim::AdamSpan SpeculationSlots::redirect(optim::AdamSpan span, int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  const bool fp32 = store_.format().fp32;
  span.master_out = static_cast<float*>(fp32 ? s.param.data() : s.master.data());
  span.exp_avg_out = static_cast<float*>(s.exp_avg.data());
  span.exp_avg_sq_out = static_cast<float*>(s.exp_avg_sq.data());
  if (!fp32) span.param_out = s.param.data();
  return span;
}

void SpeculationSlots::commit(int64_t k, int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  Chunk& c = store_.chunk(k);
  PSTAR_INTERNAL_ASSERT(
      s.taken && c.compute_place == Place::kHost && c.optimizer_place == Place::kHost && !c.nvme,
      "committing chunk ", k, " from slot ", slot);
  std::swap(c.param, s.param);
  if (!store_.format().fp32) std::swap(c.master, s.master);
  std::swap(c.exp_avg, s.exp_avg);
  std::swap(c.exp_avg_sq, s.exp_avg_sq);
  store_.repoint(k);
  s.taken = false;
}

}  // namespace pstar::engine
