// The chunk engine's module hooks and moments (Notes [placement], [gathering], [prefetch] and
// [host adam overlap] in engine/chunked_engine.h): each moment asks placement what to move, then
// the store, group sync and hybrid Adam act.
#include <algorithm>
#include <set>

#include "chunked_engine_impl.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/base/strings.h"
#include "pstar/core/log.h"

namespace pstar::engine {

ChunkedEngine::Impl::Impl(std::unique_ptr<tier::DeviceTier> tier, const ChunkFormat& format,
                          chunk::Sharding sharding, std::vector<int64_t> sizes,
                          std::vector<int64_t> parts, dist::Communicator* comm,
                          const EngineSettings& engine_settings,
                          const PlacementSettings& placement_settings,
                          const optim::AdamHyper& adam_settings, bool overlap_adam)
    : settings(engine_settings),
      store(std::move(tier), format, sharding, std::move(sizes), std::move(parts)),
      placement(placement_settings),
      sync(store, comm, engine_settings.overlap_comm, engine_settings.reduce_buffer_cap),
      grads(store),
      adam(store, adam_settings, overlap_adam, sharding.world_size) {
  // Note [collectives beside compute]: a chunk moves only once no queued collective uses it.
  store.set_move_guard([this](int64_t k) { sync.await_chunk(k); });
}

void ChunkedEngine::Impl::note_footprint(int64_t reserved_non_model) {
  const tier::DeviceTier::Footprint fp = store.tier().footprint();
  const int64_t chunks =
      fp.payload_reserve_bytes > 0 ? fp.payload_reserve_bytes : interval_chunk_bytes;
  step.device_reserved_peak =
      std::max(step.device_reserved_peak, chunks + reserved_non_model + fp.scratch_bytes);
}

void ChunkedEngine::Impl::begin_moment(const std::string& what) {
  adam.record_finished();
  tier::DeviceTier& tier = store.tier();
  const int64_t reserved = tier.non_model_reserved_peak_bytes();
  const int64_t non_model = tier.reset_non_model_peak();
  // The window since the last optimizer step closed in end_step, which counted it for the step
  // it belongs to; a step's peak covers its own moments only (as a profile's rows do).
  if (placement.moment() >= 0) {
    step.device_peak = std::max(step.device_peak, interval_chunk_bytes + non_model);
    note_footprint(reserved);
  }
  if (store.observer() != nullptr) store.observer()->close_moment(non_model);
  placement.close_window(non_model);
  const int64_t budget = store.device_budget();
  PSTAR_CHECK(interval_chunk_bytes + non_model <= budget, OutOfMemoryError,
              "device tier over budget before ", what, ": chunks ",
              format_bytes(interval_chunk_bytes), " + non-model ", format_bytes(non_model),
              " > engine.device_memory ", format_bytes(budget),
              "; raise engine.device_memory, lower train_micro_batch_size_per_gpu, or turn on "
              "engine.activation_checkpointing");
  placement.open_moment(what, in_backward);
}

DeviceRoom ChunkedEngine::Impl::device_room() const {
  DeviceRoom room;
  for (int64_t k = 0; k < store.num_chunks(); ++k) {
    const Chunk& c = store.chunks()[static_cast<size_t>(k)];
    if (!c.movable() || c.compute_place != Place::kDevice) continue;
    room.resident.push_back(k);
    if (c.compute_count == 0) room.idle.push_back(k);
  }
  room.margin_bytes = store.margin_bytes();
  room.gathered_bytes = store.gathered_device_bytes();
  room.capacity_bytes = store.tier().device_capacity_bytes();
  return room;
}

void ChunkedEngine::Impl::make_resident(const std::vector<int64_t>& needed,
                                        const std::string& what) {
  const std::set<int64_t> need_set(needed.begin(), needed.end());
  const std::vector<int64_t> need(need_set.begin(), need_set.end());
  int64_t missing = 0;
  // Note [split modules]: a split module's parts come in its span, gathered, not uploaded.
  for (int64_t k : need)
    missing += !store.chunk(k).split() && store.chunk(k).compute_place == Place::kHost
                   ? store.compute_bytes(k)
                   : 0;
  // Note [collectives beside compute]: the copies a reduction still holds go first, as they would
  // have gone before this moment without the queue.
  if (sync.reductions_pending() && missing > placement.free_movable_bytes(device_room()))
    sync.finish_reductions();
  for (int64_t k : placement.evictions(need, missing, device_room(), what))
    store.move_compute(k, Place::kHost);
  for (int64_t k : need) {
    if (store.chunk(k).remote || store.chunk(k).split()) continue;
    upload_making_room(k, need, what);
    store.await_upload(k);
  }
  const int64_t device_bytes = store.device_bytes().current;
  PSTAR_CHECK(device_bytes <= store.device_budget(), OutOfMemoryError, "device tier: ", what,
              " needs ", format_bytes(device_bytes),
              " of chunks on the device, more than engine.device_memory ",
              format_bytes(store.device_budget()),
              "; raise engine.device_memory or lower default_chunk_size");
  interval_chunk_bytes = device_bytes;
}

// Note [fragmented arena]
// Placement counts bytes, but a device tier's arena allocates contiguous ranges: with chunks of
// several sizes (Note [chunk sizes]) its free bytes can lie in pieces none of which holds a large
// chunk. Then the idle chunks this moment does not need leave one by one, furthest next use first,
// until the upload finds a range; moves change no number. Only when none is left does the
// device's out-of-memory error stand.
void ChunkedEngine::Impl::upload_making_room(int64_t k, const std::vector<int64_t>& need,
                                             const std::string& what) {
  while (true) {
    try {
      store.move_compute(k, Place::kDevice);
      return;
    } catch (const OutOfMemoryError& e) {
      const std::vector<int64_t> order = placement.eviction_order(need, device_room());
      if (order.empty()) throw;
      log::debug("device tier: ", what, ": no contiguous room for chunk ", k, " (",
                 format_bytes(store.compute_bytes(k)), "); evicting chunk ", order.front(),
                 " too (", e.what(), ")");
      store.move_compute(order.front(), Place::kHost);
    }
  }
}

// Room comes first from free space, then from evicting chunks furthest-next-use first; those are
// never used at t or t + 1, so loading t + 1's chunk in their place is what the furthest-next-use
// order would do anyway.
void ChunkedEngine::Impl::prefetch(const std::vector<int64_t>& need_now) {
  const std::vector<int64_t> next = placement.prefetch_candidates();
  if (next.empty()) return;
  std::vector<int64_t> wanted;
  for (int64_t k : next) {
    const Chunk& c = store.chunk(k);
    if (c.remote || c.split() || c.host_only() || c.compute_place != Place::kHost) continue;
    // A chunk whose Adam is still running waits for its module (Note [host adam overlap]):
    // blocking here would hold back the compute of the module before it.
    if (c.adam.queued()) {
      if (!adam.finished(k)) continue;
      adam.await_chunk(k);
    }
    wanted.push_back(k);
  }
  if (wanted.empty()) return;
  const PrefetchPlan plan = placement.prefetch(wanted, need_now, device_room());
  if (plan.fetch <= 0) return;
  for (int64_t k : plan.evict) store.move_compute(k, Place::kHost);
  for (int64_t i = 0; i < plan.fetch; ++i) {
    try {
      store.move_compute(wanted[static_cast<size_t>(i)], Place::kDevice, /*ahead=*/true);
    } catch (const OutOfMemoryError&) {
      break;  // Note [fragmented arena]: no contiguous room; the chunk comes at its own moment
    }
  }
  interval_chunk_bytes = store.device_bytes().current;
}

void ChunkedEngine::Impl::observe_moment(const std::string& what, formats::ProfileStage stage) {
  EngineObserver* observer = store.observer();
  if (observer == nullptr || !observer->recording()) return;
  MemorySample memory;
  memory.device_chunks = store.device_bytes().current;
  memory.host_chunks = store.host_bytes().current;
  observer->begin_moment(what, stage, memory, store.places());
}

ChunkedEngine::Impl::ModuleUse ChunkedEngine::Impl::module_use(
    const std::vector<int64_t>& ids) const {
  ModuleUse use;
  const auto add = [&](int64_t k) {
    if (!store.chunks()[static_cast<size_t>(k)].host_only() &&
        std::find(use.chunks.begin(), use.chunks.end(), k) == use.chunks.end())
      use.chunks.push_back(k);
  };
  for (int64_t id : ids) {
    const ManagedTensor& t = store.tensors()[static_cast<size_t>(id)];
    use.groups.insert(sync.group_of(t.chunk));
    if (!t.split) {
      add(t.chunk);
      continue;
    }
    for (int64_t part = 0; part < store.sharding().world_size; ++part) add(t.chunk + part);
  }
  return use;
}

void ChunkedEngine::Impl::access(torch::nn::Module& module, const char* phase) {
  const auto& ids = store.tensors_of(module);
  ModuleUse use = module_use(ids);
  std::vector<int64_t>& needed = use.chunks;
  const std::set<int64_t>& used_groups = use.groups;
  const std::string what = str_cat(phase, " of ", store.tensors()[ids.front()].name);
  begin_moment(what);
  // Before anything reads them: uploads, gathers, and modules computing on the host.
  for (int64_t id : ids) adam.await_chunk(store.tensors()[static_cast<size_t>(id)].chunk);
  if (sync.active()) {
    std::vector<bool> keep(static_cast<size_t>(sync.num_groups()), false);
    for (int64_t g : used_groups) keep[static_cast<size_t>(g)] = true;
    for (int64_t g : placement.kept_after(placement.moment())) keep[static_cast<size_t>(g)] = true;
    // Note [collectives beside compute]: where host Adam may start early updates, the reductions
    // queued at earlier moments (which had their modules' compute to run beside) finish first, so
    // that their chunks' updates start here, one moment later than without the queue.
    if (early_updates_possible() && adam.overlapping()) sync.finish_reductions();
    sync.settle(keep);
    for (int64_t g : used_groups) {
      if (sync.gathered(g)) continue;
      adam.await_chunk(sync.own_chunk(g));  // this rank sends its own chunk's parameters
      sync.gather(g);
    }
    // Note [collectives beside compute]: the reductions the gathers' waits let finish (their
    // chunks' early updates may start below), then the new ones behind this moment's gathers,
    // beside compute once the trace can say whether the device has room for them.
    sync.finish_done();
    sync.issue_reductions(/*beside=*/placement.planned());
  }
  // Early updates (exact or speculative) in the last micro-batch's backward, after the plan, for
  // the chunks whose gradients are final now: on several ranks, after their group's reduction
  // above.
  if (early_updates_possible())
    adam.start_early_updates([this](int64_t k) { return final_grads(k); });
  make_resident(needed, what);
  prefetch(needed);
  gather_ahead();
  observe_moment(what,
                 in_backward ? formats::ProfileStage::kBackward : formats::ProfileStage::kForward);
  placement.record_use(needed, std::vector<int64_t>(used_groups.begin(), used_groups.end()));
  for (int64_t id : ids)
    store.set_state(store.tensors()[static_cast<size_t>(id)], TensorState::kCompute);
}

void ChunkedEngine::Impl::pre_forward(torch::nn::Module& module) {
  const std::lock_guard<std::mutex> lock(hook_mutex);
  access(module, "forward");
}

void ChunkedEngine::Impl::pre_backward(torch::nn::Module& module) {
  const std::lock_guard<std::mutex> lock(hook_mutex);
  // The backward writes gradients into every chunk, used in the forward or not.
  if (!in_backward) adam.await_queued();
  in_backward = true;
  access(module, "backward");
}

void ChunkedEngine::Impl::post_forward(torch::nn::Module& module) {
  const std::lock_guard<std::mutex> lock(hook_mutex);
  for (int64_t id : store.tensors_of(module))
    store.set_state(store.tensors()[static_cast<size_t>(id)], TensorState::kHoldAfterFwd);
}

void ChunkedEngine::Impl::on_grad(int64_t id) {
  const std::lock_guard<std::mutex> lock(hook_mutex);
  grads.arrive(id);
  sync.grad_arrived(id);
}

void ChunkedEngine::Impl::optimizer_moment() {
  adam.await_for_optimizer();
  in_backward = false;
  begin_moment("optimizer step");
  sync.release_all();
  std::vector<int64_t> on_device;
  for (int64_t k = 0; k < store.num_chunks(); ++k) {
    const Chunk& c = store.chunk(k);
    if (c.remote) continue;
    if (c.margin())
      on_device.push_back(k);
    else
      store.move_compute(k, Place::kHost);
  }
  placement.record_use(on_device, {});
  interval_chunk_bytes = store.device_bytes().current;
  observe_moment("optimizer step", formats::ProfileStage::kOptimizer);
}

// Note [collectives beside compute]: the groups the next moment uses are queued for gathering
// while this module computes, each started now where the device has room for it beside what this
// moment holds, else at its use. Then, where the reductions still running hold more than this
// moment's share of the device, they finish, as they would have without the queue.
void ChunkedEngine::Impl::gather_ahead() {
  if (!sync.beside_compute() || !placement.planned()) return;
  const std::vector<int64_t> ahead =
      sync.ahead_candidates(placement.groups_after(placement.moment()));
  for (int64_t g : ahead) adam.await_chunk(sync.own_chunk(g));  // its part is read from now on
  // The room left once the next moment's own chunks are up: they come first.
  int64_t free = placement.free_movable_bytes(device_room());
  for (int64_t k : placement.prefetch_candidates()) {
    const Chunk& c = store.chunk(k);
    if (!c.remote && !c.split() && !c.host_only() && c.compute_place == Place::kHost)
      free -= store.compute_bytes(k);
  }
  for (int64_t g : ahead) {
    const int64_t bytes = sync.remote_device_bytes(g);
    const bool now = bytes <= free;
    if (now) free -= bytes;
    sync.queue_ahead(g, now);
  }
  if (sync.reductions_pending() && placement.free_movable_bytes(device_room()) < 0)
    sync.finish_reductions();
  interval_chunk_bytes = store.device_bytes().current;
}

// The host-only embedding's first (it runs first), then the trace's order (for a remote chunk,
// its group's: gathering it sends this rank's chunk of the group), then any left.
std::vector<int64_t> ChunkedEngine::Impl::forward_order() const {
  const int64_t num = store.num_chunks();
  std::vector<int64_t> order;
  std::vector<bool> listed(static_cast<size_t>(num), false);
  const auto add = [&](int64_t k) {
    const int64_t own = sync.own_chunk(sync.group_of(k));
    // The last group may be short of this rank's chunk.
    if (own >= num || listed[static_cast<size_t>(own)]) return;
    listed[static_cast<size_t>(own)] = true;
    order.push_back(own);
  };
  for (int64_t k = 0; k < num; ++k)
    if (store.chunks()[static_cast<size_t>(k)].host_only()) add(k);
  for (const auto& used : placement.trace().accesses)
    for (int64_t k : used) add(k);
  for (int64_t k = 0; k < num; ++k) add(k);
  return order;
}

void ChunkedEngine::Impl::plan_margin() {
  const int64_t num = store.num_chunks();
  // The chunks that may join the margin, in the order they join: those placed on the device at
  // start-up (Note [fit]) are in it already. NVMe chunks come last and stay out (the fit sent
  // their optimizer state there for want of room), but count when deciding whether all fit.
  std::vector<int64_t> candidates;
  for (int64_t k = 0; k < num; ++k)
    if (store.chunk(k).margin()) candidates.push_back(k);
  const auto fixed = static_cast<int64_t>(candidates.size());
  for (const bool nvme : {false, true})
    for (int64_t k = 0; k < num; ++k)
      if (store.chunk(k).movable() && store.chunk(k).nvme == nvme) candidates.push_back(k);
  // Note [gathering]: the other ranks' chunks a moment holds gathered take device room the margin
  // must leave, and with the queue (Note [collectives beside compute]) one more group: gathered
  // ahead or still being reduced.
  int64_t gathered = 0;
  if (sync.active()) {
    std::vector<int64_t> group_bytes;
    for (int64_t g = 0; g < sync.num_groups(); ++g)
      group_bytes.push_back(sync.remote_device_bytes(g));
    gathered = placement.gathered_peak_bytes(group_bytes);
    if (sync.beside_compute())
      gathered += *std::max_element(group_bytes.begin(), group_bytes.end());
    gathered += sync.reduce_buffer_bytes();  // Note [flat gathers]: held through the backward
  }
  const int64_t margin =
      placement.margin_size(candidates, store.tier().device_capacity_bytes(), gathered);
  const int64_t max_non_model = placement.peak_non_model();
  const int64_t max_needed = placement.largest_working_set();
  int64_t given = fixed;
  for (int64_t i = fixed; i < margin; ++i) {
    const int64_t k = candidates[static_cast<size_t>(i)];
    Chunk& c = store.chunk(k);
    if (c.nvme) break;
    c.residence = Residence::kMargin;
    ++given;
    // The margin is permanent device memory: count it against the budget now.
    store.move_optimizer_state(k, Place::kDevice);
    store.move_compute(k, Place::kDevice);
  }
  // The host blocks the margin left stay free for good (Note [exact-size host pool]).
  if (given > fixed) store.tier().trim();
  std::vector<int64_t> in_margin;
  for (int64_t k = 0; k < num; ++k)
    if (store.chunk(k).margin()) in_margin.push_back(k);
  placement.set_margin(in_margin, num);
  adam.set_order(forward_order());
  log::info("chunk plan after warm-up: ", placement.trace().num_moments(),
            " moments, peak non-model ", format_bytes(max_non_model), ", ", given, " of ", num,
            " chunks in the device margin (Adam on the device; ", fixed,
            " of them placed there at start-up), working set up to ", max_needed, " chunk(s) (",
            format_bytes(placement.largest_working_set_bytes()), ")",
            sync.reduce_buffer_bytes() > 0
                ? str_cat(", the reductions' flat buffer ",
                          format_bytes(sync.reduce_buffer_bytes()), " through the backward")
                : std::string());
}

// Note [speculative adam]: a slot for every host chunk that may be speculated, as far as
// engine.host_memory has room beside the most the tier's pools held in a planned step and one
// compute payload more (so that a steady step neither grows nor trims them).
void ChunkedEngine::Impl::provide_speculation_slots() {
  pools.slots_made = true;
  int64_t host_chunks = 0;
  for (const Chunk& c : store.chunks())
    host_chunks += !c.remote && !c.margin() && !c.nvme && !c.host_only() && c.used > 0 ? 1 : 0;
  if (host_chunks == 0) {
    log::info("speculative Adam: every chunk's Adam runs on the device; nothing to speculate");
    return;
  }
  const int64_t now = store.tier().host_memory().current();
  const int64_t spare = store.chunk_size() * store.format().payload.compute();
  const int64_t made =
      adam.provide_slots(host_chunks, std::max<int64_t>(0, pools.high - now) + spare);
  // Asked for by name, speculation that cannot run once is a plan that does not fit; "auto" makes
  // do with what there is.
  if (made == 0 && settings.speculation_forced) {
    const int64_t slot = adam.slots()->slot_bytes();
    const int64_t held = std::max({store.host_bytes().current, now, pools.high}) + spare;
    throw OutOfMemoryError(
        str_cat("engine.speculative_adam is true, but engine.host_memory (",
                format_bytes(store.host_budget()), ") has no room for one rollback slot (",
                format_bytes(slot), ") beside the ", format_bytes(held),
                " the chunks' payload pools need in a step (with one compute payload spare)",
                "; set engine.host_memory to at least ", format_bytes(held + slot), " (",
                format_bytes(held + host_chunks * slot),
                " speculates every host chunk), or "
                "engine.speculative_adam to \"auto\" or false"));
  }
  log::info("speculative Adam: rollback space for ", made, " of ", host_chunks, " host chunks (",
            format_bytes(adam.slots()->bytes()), " of host memory, beside the ",
            format_bytes(std::max(now, pools.high)), " the payload pools held and ",
            format_bytes(spare), " spare",
            made < host_chunks
                ? "; engine.host_memory has no room for more, so the others wait for the gradient "
                  "norm"
                : "",
            ")");
}

bool ChunkedEngine::Impl::final_grads(int64_t k) const {
  const Chunk& c = store.chunks()[static_cast<size_t>(k)];
  if (c.compute_count > 0) return false;
  // On several ranks a gradient is final once its group is reduced into this rank's chunk.
  if (sync.active()) return sync.reduced(sync.group_of(k));
  return c.grads_missing == 0;
}

void ChunkedEngine::Impl::finish_step_memory() {
  tier::DeviceTier& tier = store.tier();
  const int64_t device_bytes = store.device_bytes().current;
  step.device_peak = std::max(step.device_peak, device_bytes);
  // The optimizer step's window is this step's too (the next step's first moment restarts it).
  step.device_peak = std::max(step.device_peak, interval_chunk_bytes + tier.non_model_peak_bytes());
  note_footprint(tier.non_model_reserved_peak_bytes());
  step.device_reserved_peak = std::max(step.device_reserved_peak, step.device_peak);
  Traffic& traffic = store.traffic();
  const int64_t syncs = traffic.syncs + tier.own_synchronizations() - step.tier_syncs_before;
  if (step.device_reserved_peak > store.device_budget() && !warned_footprint) {
    // The plan keeps chunks and live allocations under the budget; what the device holds beyond
    // them (the caching allocator's freed blocks, the tier's scratch) is outside its control.
    warned_footprint = true;
    const int64_t reserve = tier.footprint().payload_reserve_bytes;
    log::warn("the device held ", format_bytes(step.device_reserved_peak), " at most in step ",
              placement.iterations(), " (chunk payloads ",
              format_bytes(reserve > 0 ? reserve : step.device_peak),
              ", LibTorch's reserved memory and the tier's scratch), more than "
              "engine.device_memory ",
              format_bytes(store.device_budget()),
              "; LibTorch's caching allocator keeps freed memory: lower "
              "train_micro_batch_size_per_gpu, turn on engine.activation_checkpointing, or set "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
  }
  EngineMetrics m;
  m.device_peak_bytes = step.device_peak;
  m.device_reserved_peak_bytes = step.device_reserved_peak;
  m.steady.device_syncs = syncs;
  const tier::DeviceTier::HostMemory pools_now = tier.host_memory();
  m.steady.pool_allocated_bytes =
      pools_now.pinned.allocated + pools_now.pageable.allocated - step.pool_allocated_before;
  m.steady.pool_trims = traffic.trims;
  m.host_peak_bytes = store.host_bytes().peak;
  m.moved_h2d_bytes = traffic.h2d;
  m.moved_d2h_bytes = traffic.d2h;
  m.move_s = traffic.move_s;
  m.prefetched_h2d_bytes = traffic.prefetched;
  const AdamFigures& figures = adam.figures();
  m.adam.device_chunks = figures.device_chunks;
  m.adam.host_s = figures.host_s;
  m.adam.host_passes = figures.passes;
  m.adam.host_bytes = figures.host_bytes;
  m.adam.norm_host_bytes = step.norm_host_bytes;
  if (adam.overlapping()) {
    m.adam.queued_chunks = figures.queued;
    m.adam.early_chunks = figures.early;
    m.adam.wait_s = figures.wait_s;
    m.adam.early_s = figures.early_s;
    m.adam.waited_behind = figures.waited_behind;
  }
  if (settings.speculation) {
    m.adam.speculated_chunks = figures.speculated;
    m.adam.rolled_back_chunks = figures.rolled_back;
    m.adam.rollback_s = figures.rollback_s;
    m.adam.cancelled_chunks = figures.cancelled;
  }
  if (NvmeOptimizer* nvme = store.nvme(); nvme != nullptr) {
    // Completed since the last step's end: queued Adam and its I/O run on into the next step.
    const NvmeFigures io = nvme->take_figures();
    m.nvme.read_bytes = io.read_bytes;
    m.nvme.write_bytes = io.write_bytes;
    m.nvme.wait_s = io.wait_s;
  }
  // Every gathered copy is released by now: what is left is this rank's own model data.
  m.model_data_bytes = device_bytes + store.host_bytes().current;
  if (sync.active()) {
    m.gathers = sync.step_gathers();
    m.reductions = sync.step_reductions();
  }
  last = m;
}

}  // namespace pstar::engine
