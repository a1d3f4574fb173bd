// The chunk engine (engine.mode "chunked"): PatrickStar-style heterogeneous memory training.
// docs/engine.md describes the design; the notes below are the decisions code elsewhere relies on.
// The engine is split into parts that each own one job (libengine/src/engine/README.md): the chunk
// store, placement (pure C++, engine/placement.h), group sync, hybrid Adam and gradients; this
// class runs each moment through them.
//
// Note [chunk layout]
// Every parameter lives in chunks of `chunk_size` elements, or in a chunk of its module's own when
// that module is larger (Note [chunk sizes] in pstar/plan/chunk_layout.h). Chunk k has a compute
// payload (the fp16/bf16 or fp32 parameters, and an fp32 gradient payload when gradients cannot
// reuse the parameter slot) and optimizer payloads (fp32 master — absent in fp32 training, where
// the parameter is the master — momentum and variance) laid out exactly like it. A leaf module's
// parameters share one chunk, placed in order of construction. Chunk k belongs to communication
// group k / N and rank k % N owns it (N = world size): only the owner keeps its payloads between
// uses (Note [gathering]).
//
// Note [param/grad reuse]
// With fp16/bf16 and no gradient accumulation, a parameter's gradient overwrites its own slot once
// its module's backward is done (the parameter is not needed again this step): model data is
// 14 bytes per parameter. With gradient accumulation the parameter is still needed by the next
// micro-batch, so gradients accumulate in a separate fp32 payload (18 bytes per parameter), and
// fp32 training always has one (16 bytes per parameter). Each parameter's .grad is set to a view of
// its gradient slot, so autograd accumulates straight into chunk memory.
//
// Note [placement]
// Moments are the pre-forward and pre-backward of every managed module and the optimizer step.
// The warm-up iterations keep only the chunks in use on the device and record, per moment, the
// chunks used and the peak non-model bytes from each moment until the next. Afterwards the margin
// (as many chunks as fit permanently with their optimizer state) stays on the device and is updated
// there; the other chunks are evicted furthest-next-use first (Note [eviction order]) under
// budget − max(non-model now, non-model next), and go to the host for the optimizer step. Chunks
// the host budget cannot hold start on the device and are in the margin from the start
// (Note [fit] in plan/memory_plan.h).
//
// Note [gathering]
// With N ranks, a rank keeps all payloads of the chunks it owns and none of the others'. Before a
// module runs, every group its parameters touch is all-gathered: each rank sends its chunk's
// parameter payload and receives the other N - 1 into fresh buffers, which count against the
// tier they compute on. A gathered group stays until its last use in the current pass (forward,
// or backward with its recomputation), as the warm-up trace tells; during the warm-up it goes
// right after use. In backward, once every parameter of a group has its gradient (or when the
// micro-batch ends), the group's gradients are reduce-scattered in fp32 to their owners and the
// gathered copies are dropped. The owner's slot then holds the sum over ranks, which grad_norm
// and update divide by N. All of this depends only on the order modules run in, which every rank
// shares, so the ranks always issue the same collectives in the same order. After the warm-up the
// collectives run on a communication thread beside compute, the next moment's groups gathered
// ahead (Note [collectives beside compute] in engine/group_sync.h); a gathered payload is read
// only once any copy ahead into it has landed (Note [prefetch]).
//
// Note [prefetch]
// After the warm-up, once moment t's chunks are resident, the owned chunks the trace says moment
// t + 1 uses start their uploads with DeviceTier::copy_ahead, so that on a GPU they run while t's
// module computes; moment t + 1 awaits them (DeviceTier::await_copies) before its module runs.
// They must fit in moment t's room (the budget rule already keeps t + 1's non-model peak free):
// free room first, then evictions furthest next use first among chunks used neither at t nor at
// t + 1, which the furthest-next-use order would evict before any of t + 1's anyway. The optimizer
// step (the trace's last moment) is never prefetched for: it sends movable chunks to the host.
// Placement changes, numbers do not. engine.prefetch turns it off. A chunk whose host Adam is
// still queued (Note [host adam overlap]) is not prefetched: it waits for its own module.
//
// Note [host adam overlap]
// After the warm-up, with engine.overlap_adam, update() runs the margin's Adam as before but
// queues the host's share on a worker thread (core::OrderedWorker), chunk by chunk in the order the
// next step's forward first needs them, and returns. The training thread ends the step and starts
// the next; it waits for a chunk's Adam only where it next touches that chunk's payloads: when a
// module that uses it begins (before its upload, its group's gather, or, for the host-pinned
// embedding, its compute on the host), and for every chunk when the backward or the next optimizer
// step begins, and before a checkpoint is read or written. So on a GPU the host updates while the
// device runs the next forward. Each chunk's Adam is the same call on the same bytes as without
// the worker, so the numbers do not change. Without param/grad reuse the worker also zeroes the
// chunk's gradient payload after its Adam. "auto" (the default) turns it on for a CUDA tier only:
// on the emulated tier the worker and the forward share the same cores. The warm-up's updates run
// in place (the plan moves the margin's optimizer state as the warm-up ends).
// Early updates: when the update does not depend on the gradients (no clipping, no fp16 loss
// scale; the trainer calls expect_update()), on one rank, in the last micro-batch's backward, a
// host chunk whose tensors all have their gradients and none is in use goes to the host at the
// next moment and its sum of squares and Adam are queued then, so the host updates while the
// device runs the rest of the backward. The optimizer step waits only for those sums (grad_norm
// adds them in chunk order, as always); update() queues the chunks left.
//
// Note [nvme tier]
// With engine.nvme_path, when the fit (Note [nvme fit] in plan/memory_plan.h) cannot place the
// model in host and device memory, the optimizer payloads of the first fit.nvme_chunks movable
// chunks a rank owns live in slots of an NVMe store, not in memory: their Blocks are empty, and
// views of a staging buffer only while host code works on them (ChunkStore::stage_optimizer: the
// start-up copy of the masters, parameter loads, checkpoints, a skipped step's restore), one chunk
// at a time. Their host Adam stages them itself (HybridAdam::host_step): read ahead, updated,
// written back behind (Note [nvme staging] in engine/nvme_optimizer.h). Their compute payloads
// move like any movable chunk's; they are never promoted to the margin. The fit may also keep the
// compute payloads of fit.nvme_device_chunks more on the device for good (margin chunks with their
// optimizer payloads on NVMe): at the optimizer step, on the training thread, their param (and
// grad) are copied into a host buffer, updated there by host Adam and copied back. Each update is
// the same call on the same bytes as in memory, so the numbers do not change.
//
// Note [evaluation]
// A held-out loss is forwards between steps (ParamEngine::begin_eval/end_eval), and must change
// nothing of training: the trainer runs them with autograd off, and the engine runs them through
// hooks of their own (evaluation.cpp) that never touch placement, so the warm-up trace, the margin
// and every later eviction and prefetch are those of a run without them. Each module's chunks
// come to the device as the warm-up's rule has it (only what is in use, beside what was there) —
// a queued host Adam finishes first, with several ranks its groups are gathered and released —
// and end_eval moves every chunk the evaluation uploaded back to the host, so the next step finds
// each chunk where it left it. Moves copy bytes, so the numbers could not change anyway; keeping
// the places also keeps the next step's moves, budgets and metrics. The evaluation's non-model
// memory falls between end_step and begin_step, a window begin_step discards; its moves, traffic
// and collectives are dropped from the figures and are not reported to the observer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "pstar/core/setup_phases.h"
#include "pstar/engine/param_engine.h"
#include "pstar/model/init.h"
#include "pstar/plan/memory_plan.h"

namespace torch::nn {
class Module;
}
namespace pstar::model {
class ModuleHooks;
}
namespace pstar::chunk {
struct AccessTrace;
}
namespace pstar::dist {
class Communicator;
}
namespace pstar::plan {
struct RunPlan;
}
namespace pstar::tier {
class DeviceTier;
}

namespace pstar::engine {

using plan::LeafModule;
class EvalHooks;

// Where the values of the parameters register_unit takes come from.
struct UnitValues {
  enum class From : uint8_t {
    kModule,  // the module's own values, copied into the chunks (a caller's model)
    kInit,    // the counter-based initial values (Note [counter-based init] in
              // pstar/model/init.h), written straight into the chunks: the module's parameters
              // hold none (model::BuildOptions::on_unit_built)
    kLoad,    // none yet: load_parameter writes every parameter before training
  };
  From from = From::kModule;
  // kInit: how each parameter (by name) starts, and the seed.
  std::function<model::ParameterInit(const std::string& name)> init;
  uint64_t seed = 0;
};

class ChunkedEngine : public ParamEngine {
 public:
  // Plans the chunk size from the leaf modules (in construction order) and checks that model
  // data, the working set and `predicted_non_model` bytes (plan::estimate_gpt_activations for a
  // GPT; 0 when unknown, and the warm-up measures it) fit the two tiers (Note [fit]), before
  // anything is allocated. Throws OutOfMemoryError when they do not. Everything else it needs
  // comes from `plan` (plan::resolve_run): precision, budgets, accumulation, prefetch, Adam and its
  // overlap, the warm-up. With `comm` (several ranks, plan.world_size of them) this rank owns every
  // world_size-th chunk (Note [gathering]); `comm` must outlive the engine. `device_tier` holds
  // the payloads and runs the kernels (Note [device tier]); null: the emulated tier.
  ChunkedEngine(const plan::RunPlan& plan, const std::vector<LeafModule>& leaves,
                int64_t predicted_non_model = 0, dist::Communicator* comm = nullptr,
                std::unique_ptr<tier::DeviceTier> device_tier = nullptr);
  ~ChunkedEngine() override;

  // The bytes of a CUDA tier's arena for `plan` (plan::device_arena_bytes of its device budget).
  static int64_t device_arena_bytes(const plan::RunPlan& plan, int64_t predicted_non_model);

  // The device tier in use.
  tier::DeviceTier& device_tier();

  // The leaf modules of `unit` that own parameters, in the order register_unit takes them; a
  // module deriving from model::EmbeddingLeaf is an embedding (kept on the host with
  // use_cpu_embedding).
  static std::vector<LeafModule> leaf_modules(torch::nn::Module& unit);

  // Takes the parameters of every leaf module of `unit` into chunks, their values as `values` say,
  // and frees the original storage. `prefix` prefixes parameter names.
  void register_unit(torch::nn::Module& unit, const std::string& prefix,
                     const UnitValues& values = {});
  // Writes a parameter's full-precision value (e.g. from a checkpoint) into its chunks.
  void load_parameter(const std::string& name, const at::Tensor& value);
  // After the last register_unit: checks every expected parameter arrived.
  void finish_registration();

  int64_t chunk_size() const;  // the ordinary chunk's elements
  int64_t num_chunks() const;
  // Every chunk's elements: a module larger than the ordinary chunk has one of its own (Note
  // [chunk sizes] in pstar/plan/chunk_layout.h).
  std::vector<int64_t> chunk_sizes() const;
  // The most compute payload bytes one moment of the trace uses (0 before the plan).
  int64_t largest_working_set_bytes() const;

  // For tests and reports: the trace the plan was made from (empty before the plan), the bytes of
  // an ordinary chunk's compute and optimizer payloads (chunk k's: chunk_sizes()[k] times those
  // over chunk_size()), the device budget, and how many chunks are in the margin.
  const chunk::AccessTrace& trace() const;
  int64_t compute_chunk_bytes() const;
  int64_t optimizer_chunk_bytes() const;
  int64_t device_budget_bytes() const;
  // The start-up fit: which chunks start on which tier, and the per-tier accounting.
  const plan::Fit& fit() const;
  int64_t margin_chunks() const;
  // The most host memory held while the model was taken into chunks: chunk payloads plus the
  // tensors LibTorch held at the time.
  int64_t startup_peak_bytes() const;
  // Note [set-up phases]: where registration's time went so far: payload memory (kAlloc), initial
  // values written into the chunks (kInit) and the rest of taking parameters into chunks (kChunks).
  core::SetupPhases setup_phases() const;

  std::string describe() const override;
  // Every rank's count, though another rank's parameters hold no values here between uses.
  int64_t num_parameters() const override;
  void begin_step() override;
  void expect_update(double lr, double grad_multiplier) override;
  void speculate_update(double lr, double grad_multiplier, double max_norm) override;
  void skip_update(const std::vector<std::string>& names) override;
  void end_micro_batch() override;
  double grad_norm(double loss_scale) override;
  void update(double lr, double grad_multiplier) override;
  void end_step() override;
  void fill_metrics(EngineMetrics& metrics) override;
  void state_dict(TensorList& out) override;
  void load_state_dict(const TensorMap& in, const std::string& file) override;

  // Reports to `observer` from now on (null: stops): gives it the engine's shape (layout, budgets,
  // chunk table) at once.
  bool set_observer(EngineObserver* observer) override;

  // The hooks the model's run_module() calls while this engine trains.
  model::ModuleHooks* hooks() override;

  // Note [evaluation].
  void begin_eval() override;
  model::ModuleHooks* eval_hooks() override;
  void end_eval() override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<EvalHooks> eval_;  // destroyed before impl_, which it refers to
};

}  // namespace pstar::engine
