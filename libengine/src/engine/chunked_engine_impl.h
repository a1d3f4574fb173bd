// The chunk engine's inside: the parts (store, placement, group sync, hybrid Adam, gradients) and
// the module hooks that run each moment through them. Private to engine/; chunked_engine.cpp holds
// the set-up and the ParamEngine calls, moments.cpp the hooks and the moments.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "chunk_store.h"
#include "gradients.h"
#include "group_sync.h"
#include "hybrid_adam.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/engine/metrics.h"
#include "pstar/engine/placement.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/model/hooks.h"
#include "pstar/plan/memory_plan.h"

namespace pstar::engine {

// What the engine reads of the run plan after construction.
struct EngineSettings {
  int64_t accumulation = 1;  // micro-batches per step
  int64_t warmup_iterations = 1;
  bool use_cpu_embedding = false;
  bool speculation = false;  // Note [speculative adam]: rollback slots are made after the warm-up
  bool speculation_forced = false;  // engine.speculative_adam true: no room for a slot is an error
  bool overlap_comm = true;         // Note [collectives beside compute] (RunPlan::overlap_comm)
  int64_t reduce_buffer_cap = 0;    // Note [flat gathers] (RunPlan::reduce_buffer_cap)
};

// The device memory of one step, beside what the parts count.
struct StepMemory {
  int64_t device_peak = 0;
  // Note [device footprint]: the device memory held at most, the tier's reserves included.
  int64_t device_reserved_peak = 0;
  int64_t tier_syncs_before = 0;      // the tier's own synchronisations at begin_step
  int64_t pool_allocated_before = 0;  // what the tier's host pools had taken at begin_step
  int64_t norm_host_bytes = 0;        // the gradient norm's reads of host memory
};

// Note [speculative adam]: the planned steps so far, the most the tier's host pools held at the end
// of one (before a trim), and whether the rollback slots were made.
struct SteadyPools {
  int64_t planned_steps = 0;
  int64_t high = 0;
  bool slots_made = false;
};

struct ChunkedEngine::Impl : public model::ModuleHooks {
  // `sizes`, `parts`: every chunk's capacity and its part of a split module (ChunkStore).
  Impl(std::unique_ptr<tier::DeviceTier> tier, const ChunkFormat& format, chunk::Sharding sharding,
       std::vector<int64_t> sizes, std::vector<int64_t> parts, dist::Communicator* comm,
       const EngineSettings& settings, const PlacementSettings& placement_settings,
       const optim::AdamHyper& adam_settings, bool overlap_adam);

  EngineSettings settings;
  ChunkStore store;
  Placement placement;
  GroupSync sync;
  Gradients grads;
  // The start-up plan (Note [fit]): where each chunk this rank owns is made (fit.homes).
  plan::Fit fit;
  // Registration (registration.cpp): the leaves planned and taken so far; Note [set-up phases]:
  // the time spent in register_unit and finish_registration (the store's payload allocation and
  // the initial values are part of it), the initial values' own time (kInit), and the progress line
  // (the parameters taken so far, in bytes of model data).
  struct Registering {
    int64_t expected_leaves = 0, registered_leaves = 0;
    std::vector<int64_t> leaf_chunk;  // each leaf's chunk, as the plan lays them out
    double seconds = 0;
    int64_t total_bytes = 0;
    core::SetupPhases values;
    // The constructor's own time: the layout and fit (kPlan), and the allocation it made (the
    // pinned reservation, NVMe buffers), which the store's phases hold already.
    double construction_plan_s = 0, construction_alloc_s = 0;
    std::unique_ptr<core::SetupProgress> progress;
  } registering;
  // Start-up is on the host whatever the tier: LibTorch's CPU allocations are what the model holds
  // before it is in chunks. Host bytes at start-up: chunk memory plus what LibTorch holds.
  memory::CpuAllocationCounter& host_counter = memory::CpuAllocationCounter::instance();
  int64_t startup_peak = 0;
  int64_t interval_chunk_bytes = 0;  // device chunk bytes held since the current moment began
  bool in_backward = false;
  int64_t micro_batches_done = 0;  // this step's
  StepMemory step;
  SteadyPools pools;
  EngineMetrics last;  // the figures of the step that ended last
  bool warned_footprint = false;
  // Autograd runs a CPU tensor's backward on the thread that called backward(), and a CUDA one's on
  // its device thread: with use_cpu_embedding on the CUDA tier, the embedding's gradient hook runs
  // on the training thread while the device thread may be in another module's hook. Every hook
  // holds this while it reads or changes the engine's state.
  std::mutex hook_mutex;
  // Last member: destroyed first, so a running Adam finishes before any payload is freed.
  HybridAdam adam;

  // ---- set-up (chunked_engine.cpp) ----
  void sample_startup();
  // A chunk at the end for a module of `residence`: another rank's, one past the host's share
  // (Note [fit]: in the margin, on the device), or one on the host.
  void append_chunk(Residence residence);
  void register_leaf(torch::nn::Module& module, const std::string& prefix, bool host_only,
                     const UnitValues& values);
  // Note [counter-based init]: writes the initial values of tensors `ids` into the chunks this
  // rank owns, over every thread.
  void write_initial_values(const std::vector<int64_t>& ids, const UnitValues& values);

  // ---- moments (moments.cpp) ----
  void pre_forward(torch::nn::Module& module) override;
  void pre_backward(torch::nn::Module& module) override;
  void post_forward(torch::nn::Module& module) override;
  void on_grad(int64_t id);
  // What a module's tensors `ids` use: the chunks that must be on the device for it (not the
  // host-only ones; every part of a split module's group, which its span holds: Note [split
  // modules]) and the communication groups they touch.
  struct ModuleUse {
    std::vector<int64_t> chunks;
    std::set<int64_t> groups;
  };
  ModuleUse module_use(const std::vector<int64_t>& ids) const;
  // A moment begins: close the non-model window of the previous one (Note [placement]).
  void begin_moment(const std::string& what);
  void access(torch::nn::Module& module, const char* phase);
  // What placement needs to know about the device now.
  DeviceRoom device_room() const;
  // Makes `needed` resident on the device, evicting others as placement says.
  void make_resident(const std::vector<int64_t>& needed, const std::string& what);
  // Note [fragmented arena]: uploads chunk k for a moment that needs `need` (ascending).
  void upload_making_room(int64_t k, const std::vector<int64_t>& need, const std::string& what);
  // Note [prefetch]: starts the uploads of the next moment's chunks.
  void gather_ahead();  // Note [collectives beside compute]
  // In the last micro-batch's backward, after the plan: chunks whose gradients are final may start
  // their host Adam.
  bool early_updates_possible() const {
    return in_backward && placement.planned() && micro_batches_done + 1 == settings.accumulation;
  }
  void prefetch(const std::vector<int64_t>& need_now);
  // The moment's row for the observer: its chunk bytes now; its non-model peak comes at its end.
  void observe_moment(const std::string& what, formats::ProfileStage stage);
  // The optimizer moment: margin chunks are updated on the device, the rest on the host.
  void optimizer_moment();
  // After the warm-up: fix the margin and the next-use index (Note [placement]).
  void plan_margin();
  // Note [speculative adam]: the rollback slots, when speculation is first chosen.
  void provide_speculation_slots();
  // Whether chunk k's gradients are final in this backward (all in and not in use; on several
  // ranks, its group reduced), for early updates.
  bool final_grads(int64_t k) const;
  // The chunks this rank owns, in the order a step's forward first needs them.
  std::vector<int64_t> forward_order() const;
  // Note [device footprint]: the device memory held in the window that ends now.
  void note_footprint(int64_t reserved_non_model);
  void finish_step_memory();
};

}  // namespace pstar::engine
