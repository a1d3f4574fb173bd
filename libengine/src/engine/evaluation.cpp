// Evaluation forwards in the chunk engine (Note [evaluation] in engine/chunked_engine.h).
#include "evaluation.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "chunked_engine_impl.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::engine {

void EvalHooks::begin() {
  PSTAR_INTERNAL_ASSERT(!active_ && !s_.in_backward, "an evaluation begins only between steps");
  active_ = true;
  const int64_t num = s_.store.num_chunks();
  resident_before_.assign(static_cast<size_t>(num), false);
  for (int64_t k = 0; k < num; ++k)
    resident_before_[static_cast<size_t>(k)] = s_.store.chunk(k).compute_place == Place::kDevice;
  brought_.clear();
  // Moves made for an evaluation are not the run's: a profile shows training only.
  observer_ = s_.store.observer();
  s_.store.set_observer(nullptr);
}

void EvalHooks::end() {
  PSTAR_INTERNAL_ASSERT(active_, "end of an evaluation that did not begin");
  s_.sync.release_all();
  for (auto& t : s_.store.tensors()) s_.store.set_state(t, TensorState::kHold);
  for (int64_t k : brought_) s_.store.move_compute(k, Place::kHost);
  brought_.clear();
  for (int64_t k = 0; k < s_.store.num_chunks(); ++k) {
    const Chunk& c = s_.store.chunk(k);
    PSTAR_INTERNAL_ASSERT(
        c.remote || (c.compute_place == Place::kDevice) == resident_before_[static_cast<size_t>(k)],
        "evaluation left chunk ", k, " elsewhere than it found it");
  }
  if (s_.sync.active()) (void)s_.sync.take_figures();
  s_.store.set_observer(observer_);
  observer_ = nullptr;
  active_ = false;
}

// Like a training moment's access (moments.cpp), but through none of placement: the chunks the
// module needs come to the device, and those the evaluation brought and no longer needs leave
// (the warm-up's rule), so the device holds what it held before plus one module's working set.
void EvalHooks::pre_forward(torch::nn::Module& module) {
  const std::lock_guard<std::mutex> lock(s_.hook_mutex);
  ChunkStore& store = s_.store;
  const auto& ids = store.tensors_of(module);
  const ChunkedEngine::Impl::ModuleUse use = s_.module_use(ids);
  const std::vector<int64_t>& needed = use.chunks;
  const std::set<int64_t>& used_groups = use.groups;
  // The updated values: a queued host Adam finishes before anything reads its chunk.
  for (int64_t id : ids) s_.adam.await_chunk(store.tensors()[static_cast<size_t>(id)].chunk);
  if (s_.sync.active()) {
    std::vector<bool> keep(static_cast<size_t>(s_.sync.num_groups()), false);
    for (int64_t g : used_groups) keep[static_cast<size_t>(g)] = true;
    s_.sync.settle(keep);
    for (int64_t g : used_groups) {
      if (s_.sync.gathered(g)) continue;
      s_.adam.await_chunk(s_.sync.own_chunk(g));
      s_.sync.gather(g);
    }
  }
  std::vector<int64_t> still;
  for (int64_t k : brought_) {
    const bool now = std::find(needed.begin(), needed.end(), k) != needed.end();
    if (!now && store.chunk(k).compute_count == 0) {
      store.move_compute(k, Place::kHost);
    } else {
      still.push_back(k);
    }
  }
  brought_ = std::move(still);
  for (int64_t k : needed) {
    Chunk& c = store.chunk(k);
    // Note [split modules]: a split module's parts come in its span.
    if (c.remote || c.split() || c.compute_place == Place::kDevice) continue;
    store.move_compute(k, Place::kDevice);
    store.await_upload(k);
    brought_.push_back(k);
  }
  const int64_t device_bytes = store.device_bytes().current;
  PSTAR_CHECK(device_bytes <= store.device_budget(), OutOfMemoryError,
              "device tier: an evaluation forward needs ", format_bytes(device_bytes),
              " of chunks on the device, more than engine.device_memory ",
              format_bytes(store.device_budget()),
              "; raise engine.device_memory or lower default_chunk_size");
  for (int64_t id : ids)
    store.set_state(store.tensors()[static_cast<size_t>(id)], TensorState::kCompute);
}

void EvalHooks::post_forward(torch::nn::Module& module) {
  const std::lock_guard<std::mutex> lock(s_.hook_mutex);
  for (int64_t id : s_.store.tensors_of(module))
    s_.store.set_state(s_.store.tensors()[static_cast<size_t>(id)], TensorState::kHoldAfterFwd);
}

void EvalHooks::pre_backward(torch::nn::Module& module) {
  PSTAR_INTERNAL_ASSERT(false, "an evaluation runs forward only (under torch::NoGradGuard)");
}

}  // namespace pstar::engine
