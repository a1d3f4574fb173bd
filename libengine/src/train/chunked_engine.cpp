#include "pstar/train/chunked_engine.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/chunk/eviction.h"
#include "pstar/chunk/sharding.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/core/ordered_worker.h"
#include "pstar/dist/communicator.h"
#include "pstar/formats/config.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/model/gpt.h"
#include "pstar/model/hooks.h"
#include "pstar/optim/host_adam.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/plan/run_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/metrics.h"
#include "pstar/train/profiler.h"

namespace pstar::train {
namespace {

using Tier = tier::Side;
using tier::Block;

using core::seconds_since;

// PatrickStar's tensor lifecycle. Only chunks with no tensor in kCompute may move.
enum class TensorState { kHold, kCompute, kHoldAfterFwd, kHoldAfterBwd };

struct Chunk {
  int64_t used = 0;  // elements
  std::vector<int64_t> tensors;
  // Compute payloads: they move together between tiers.
  Block param;  // compute dtype
  Block grad;   // fp32; only without param/grad reuse
  // Optimizer payloads: they stay on optimizer_tier.
  Block master;  // fp32; absent in fp32 training (the param is the master)
  Block exp_avg, exp_avg_sq;
  Tier compute_tier = Tier::kHost;
  Tier optimizer_tier = Tier::kHost;
  bool remote = false;        // owned by another rank: payloads only while gathered
  bool margin = false;        // pinned on the device and updated there
  bool host_pinned = false;   // use_cpu_embedding: never on the device
  bool awaiting = false;      // copied ahead to the device; compute has not waited for it yet
  int64_t compute_count = 0;  // tensors in kCompute
  int64_t grads_missing = 0;  // tensors whose gradient has not arrived this micro-batch
  // Updated early (Note [host adam overlap]): its Adam was queued in this step's backward, after a
  // job that writes its gradient's sum of squares into early_sq (read once sq_ticket is done).
  bool early = false;
  int64_t sq_ticket = 0;
  double early_sq = 0;
};

struct ManagedTensor {
  std::string name;
  torch::Tensor param;
  int64_t chunk = 0;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  TensorState state = TensorState::kHold;
  bool grad_seen = false;     // its gradient arrived this micro-batch (several ranks)
  bool grad_arrived = false;  // its gradient arrived this micro-batch (Chunk::grads_missing)
};

// A communication group: world_size consecutive chunks, one per rank (Note [chunk layout]).
struct Group {
  bool gathered = false;  // the remote chunks hold this step's parameters
  bool reduced = false;   // this micro-batch's gradients went to their owners
  int64_t tensors = 0, grads_seen = 0;
  bool grads_pending() const { return grads_seen > 0 && !reduced; }
};

struct StepStats {
  int64_t h2d = 0, d2h = 0;
  int64_t prefetched = 0;  // of h2d: copied ahead of use (Note [prefetch])
  int64_t gathers = 0, reductions = 0;
  int64_t model_data = 0;
  int64_t device_peak = 0, host_peak = 0;
  // Note [device footprint]: the device memory held at most, the tier's reserves included.
  int64_t device_reserved_peak = 0;
  // Whole-device synchronisations: the engine's calls, and the tier's own up to begin_step.
  int64_t syncs = 0;
  int64_t tier_syncs_before = 0;
  int64_t adam_device_chunks = 0;
  // Note [host adam overlap]: host chunks whose Adam was queued on the worker, those of them queued
  // early (in the backward), and the time spent waiting for queued work.
  int64_t adam_queued = 0, adam_early = 0;
  double adam_wait_s = 0;
  double move_s = 0;  // the training thread's time in moves (allocation, copy, re-pointing)
};

// A queued host Adam that finished, for the profile.
struct AdamDone {
  int64_t chunk = 0;
  double seconds = 0;
};

}  // namespace

struct ChunkedEngine::Impl : public model::ModuleHooks {
  const config::TrainConfig config;
  // Where the device tier's payloads live and its kernels run (Note [device tier]).
  std::unique_ptr<tier::DeviceTier> device_tier;
  c10::ScalarType dtype;
  int64_t elem_bytes;
  bool fp32;   // compute dtype is fp32: the param payload is the master
  bool reuse;  // Note [param/grad reuse]
  plan::PayloadBytes payload;
  int64_t chunk_size = 0;
  int64_t device_budget = 0, host_budget = 0;
  plan::Fit fit;                   // the start-up plan (Note [fit])
  int64_t first_device_chunk = 0;  // chunks from here on start on the device, in the margin
  int64_t expected_leaves = 0, registered_leaves = 0;
  bool next_chunk_host_pinned = false;

  std::vector<Chunk> chunks;
  std::vector<ManagedTensor> tensors;
  std::unordered_map<const torch::nn::Module*, std::vector<int64_t>> module_tensors;
  std::unordered_map<std::string, int64_t> tensor_by_name;

  int64_t device_bytes = 0, host_bytes = 0;
  StepStats step, last;

  // Tracing (Note [placement]). Start-up is on the host whatever the tier: LibTorch's CPU
  // allocations are what the model holds before it is in chunks.
  memory::CpuAllocationCounter& host_counter = memory::CpuAllocationCounter::instance();
  int64_t iteration = 0;  // iterations finished
  int64_t moment = -1;    // current moment in this iteration; -1 before the first
  std::vector<std::vector<int64_t>> record_accesses;
  std::vector<int64_t> record_non_model;
  chunk::AccessTrace trace;
  std::optional<chunk::NextUse> next_use;
  bool planned = false;
  int64_t interval_chunk_bytes = 0;       // device chunk bytes held since the current moment began
  std::vector<int64_t> warmup_non_model;  // running max over the warm-up iterations
  std::vector<std::string> moment_names;
  chunk::Sharding sharding;
  dist::Communicator* comm = nullptr;  // null for one rank
  Profiler* profiler = nullptr;        // while a profile records
  std::vector<Group> groups;
  // Per moment: the groups its module uses and whether it is in the backward pass, from the
  // warm-up (Note [gathering]).
  std::vector<std::vector<int64_t>> record_groups;
  std::vector<bool> record_backward;
  // After the warm-up, per moment: the groups used again before its pass ends (keep_after).
  std::vector<std::vector<int64_t>> kept_after;
  std::vector<float> reduced;  // reduce's fp32 sum of this rank's chunk
  bool in_backward = false;
  int64_t adam_steps = 0;
  bool updated = false;  // this step's update ran
  // Host bytes at start-up: chunk memory plus what LibTorch holds (the unit being taken in).
  int64_t startup_peak = 0;
  // Note [host adam overlap]: per chunk, the worker's ticket for its queued host Adam (0: none),
  // and the order update() queues chunks in, both set by the plan.
  std::vector<int64_t> adam_ticket;
  std::vector<int64_t> adam_order;
  std::mutex adam_done_mutex;
  std::vector<AdamDone> adam_done;  // guarded by adam_done_mutex: the worker appends
  // The update this step will make, when the trainer knows it before the backward (lr, multiplier).
  std::optional<std::pair<double, double>> expected_update;
  int64_t micro_batches_done = 0;  // this step's
  // Autograd runs a CPU tensor's backward on the thread that called backward(), and a CUDA one's on
  // its device thread: with use_cpu_embedding on the CUDA tier, the embedding's gradient hook runs
  // on the training thread while the device thread may be in another module's hook. Every hook
  // holds this while it reads or changes the engine's state.
  std::mutex hook_mutex;
  bool warned_footprint = false;
  // Last member: destroyed first, so a running Adam finishes before any payload is freed.
  std::unique_ptr<core::OrderedWorker> adam_worker;

  // A whole-device synchronisation by the engine: host code is about to touch payloads.
  void synchronize_tier() {
    device_tier->synchronize();
    ++step.syncs;
  }

  // Note [device footprint]: the device memory held in the window that ends now, from LibTorch's
  // reserved peak in it (read before the window is reset).
  void note_footprint(int64_t reserved_non_model) {
    const tier::DeviceTier::Footprint fp = device_tier->footprint();
    const int64_t chunks =
        fp.payload_reserve_bytes > 0 ? fp.payload_reserve_bytes : interval_chunk_bytes;
    step.device_reserved_peak =
        std::max(step.device_reserved_peak, chunks + reserved_non_model + fp.scratch_bytes);
  }

  void sample_startup() {
    startup_peak = std::max(startup_peak, host_bytes + device_bytes + host_counter.current_bytes());
  }

  Impl(const config::TrainConfig& c, c10::ScalarType d, dist::Communicator* communicator,
       std::unique_ptr<tier::DeviceTier> tier_impl)
      : config(c),
        device_tier(tier_impl ? std::move(tier_impl) : tier::make_emulated_tier()),
        dtype(d),
        elem_bytes(static_cast<int64_t>(c10::elementSize(d))),
        fp32(d == torch::kFloat32),
        reuse(d != torch::kFloat32 && c.gradient_accumulation_steps == 1),
        payload(plan::payload_bytes(elem_bytes, c.gradient_accumulation_steps > 1)),
        comm(communicator) {
    if (comm != nullptr) sharding = chunk::Sharding{comm->rank(), comm->world_size()};
    PSTAR_INTERNAL_ASSERT(payload.compute() == elem_bytes + (reuse ? 0 : 4));
  }

  int64_t compute_bytes() const { return chunk_size * payload.compute(); }
  int64_t optimizer_bytes() const { return chunk_size * payload.optimizer(); }
  int64_t whole_bytes() const { return chunk_size * payload.whole(); }

  // ---- memory accounting ------------------------------------------------------------------

  void add_bytes(Tier tier, int64_t bytes) {
    if (tier == Tier::kDevice) {
      device_bytes += bytes;
    } else {
      host_bytes += bytes;
      step.host_peak = std::max(step.host_peak, host_bytes);
    }
    if (profiler != nullptr) profiler->set_chunk_bytes(device_bytes, host_bytes);
  }

  // ---- profiling -----------------------------------------------------------------------------

  void record(int64_t chunk, formats::ChunkEventKind kind, int64_t bytes, double seconds = 0) {
    if (profiler != nullptr) profiler->event(chunk, kind, bytes, seconds);
  }

  // The moment's row: its chunk bytes now; its non-model peak arrives when it ends.
  void record_moment(const std::string& what, formats::ProfileStage stage) {
    if (profiler == nullptr || !profiler->recording()) return;
    std::vector<int8_t> places(chunks.size());
    for (size_t k = 0; k < chunks.size(); ++k) {
      const Chunk& c = chunks[k];
      const auto place = !c.param                          ? formats::ChunkPlace::kAbsent
                         : c.compute_tier == Tier::kDevice ? formats::ChunkPlace::kDevice
                                                           : formats::ChunkPlace::kHost;
      places[k] = static_cast<int8_t>(place);
    }
    MemorySample memory;
    memory.device_chunks = device_bytes;
    memory.host_chunks = host_bytes;
    profiler->begin_moment(what, stage, memory, std::move(places));
  }

  void check_host() {
    PSTAR_CHECK(host_bytes <= host_budget, OutOfMemoryError, "host tier: chunks need ",
                format_bytes(host_bytes), " but engine.host_memory is ", format_bytes(host_budget),
                "; raise engine.host_memory or engine.device_memory, or train a smaller model");
    check_host_pools();
  }

  // Note [exact-size host pool]: what the tier's host pools hold, free blocks included, counts
  // against engine.host_memory; the free blocks go back before that is called a failure.
  void check_host_pools() {
    if (device_tier->host_memory().current() <= host_budget) return;
    device_tier->trim();
    const tier::DeviceTier::HostMemory held = device_tier->host_memory();
    PSTAR_CHECK(held.current() <= host_budget, OutOfMemoryError, "host tier: the chunk payloads' ",
                "memory pools hold ", format_bytes(held.current()), " (",
                format_bytes(held.pinned.current), " of it page-locked) but engine.host_memory is ",
                format_bytes(host_budget),
                "; raise engine.host_memory or engine.device_memory, or train a smaller model");
  }

  // ---- views ---------------------------------------------------------------------------------

  torch::Tensor view(const Block& block, c10::ScalarType type, int64_t offset,
                     const std::vector<int64_t>& shape) const {
    return device_tier->view(block, type, offset, shape);
  }

  torch::Tensor param_view(const ManagedTensor& t) const {
    return view(chunks[t.chunk].param, dtype, t.offset, t.shape);
  }
  torch::Tensor master_view(const ManagedTensor& t) const {
    return view(fp32 ? chunks[t.chunk].param : chunks[t.chunk].master, torch::kFloat32, t.offset,
                t.shape);
  }
  torch::Tensor grad_view(const ManagedTensor& t) const {
    return reuse ? param_view(t) : view(chunks[t.chunk].grad, torch::kFloat32, t.offset, t.shape);
  }

  // Points every tensor of chunk k at the chunk's current payloads: the parameter's data, and its
  // .grad at the gradient slot so autograd accumulates straight into the chunk.
  void repoint(int64_t k) {
    torch::NoGradGuard no_grad;
    const bool present = static_cast<bool>(chunks[k].param);
    for (int64_t id : chunks[k].tensors) {
      auto& t = tensors[id];
      // A remote chunk between uses has no payload: its tensors hold nothing (Note [gathering]).
      t.param.set_data(present
                           ? param_view(t)
                           : torch::empty({0}, torch::dtype(dtype).device(device_tier->device_of(
                                                   chunks[k].compute_tier))));
      t.param.mutable_grad() = present ? grad_view(t) : torch::Tensor();
    }
  }

  // ---- chunks --------------------------------------------------------------------------------

  // The i-th chunk this rank owns is chunk i * N + rank.
  int64_t owned_ordinal(int64_t k) const { return k / sharding.world_size; }

  void new_chunk() {
    Chunk c;
    const int64_t k = static_cast<int64_t>(chunks.size());
    c.host_pinned = next_chunk_host_pinned;
    if (!sharding.owns(k)) {
      // Another rank's: its payloads exist here only while gathered (Note [gathering]).
      c.remote = true;
      c.compute_tier = c.optimizer_tier = c.host_pinned ? Tier::kHost : Tier::kDevice;
      chunks.push_back(std::move(c));
      return;
    }
    if (owned_ordinal(k) >= first_device_chunk) {
      // Past the host's share (Note [fit]): the chunk lives on the device for good.
      PSTAR_INTERNAL_ASSERT(!c.host_pinned, "an embedding chunk was planned onto the device");
      c.margin = true;
      c.compute_tier = c.optimizer_tier = Tier::kDevice;
    }
    const Tier tier = c.compute_tier;
    // Note [pinned what moves]: compute payloads move unless the chunk always computes on the
    // host; optimizer state moves at most once, if the plan promotes the chunk to the margin.
    const bool compute_moves = !c.host_pinned;
    c.param = allocate_payload(tier, chunk_size * elem_bytes, compute_moves);
    if (!reuse) c.grad = allocate_payload(tier, chunk_size * 4, compute_moves);
    if (!fp32) c.master = allocate_payload(tier, chunk_size * 4, false);
    c.exp_avg = allocate_payload(tier, chunk_size * 4, false);
    c.exp_avg_sq = allocate_payload(tier, chunk_size * 4, false);
    chunks.push_back(std::move(c));
    add_bytes(tier, whole_bytes());
    check_host();
  }

  // A zeroed payload on `tier`; `moves`: copies between the sides will take it back and forth
  // (Note [pinned what moves]).
  Block allocate_payload(Tier tier, int64_t bytes, bool moves) {
    return tier == Tier::kHost && !moves ? device_tier->allocate_host_only(bytes)
                                         : device_tier->allocate(tier, bytes);
  }

  // Replaces `block` by a copy of it on side `to`; `ahead`: a prefetch (Note [prefetch]).
  void moved_to(Block& block, Tier to, bool ahead = false) {
    // The copy below writes all of it.
    Block moved = device_tier->allocate_uninitialized(to, block.bytes());
    if (ahead)
      device_tier->copy_ahead(moved, block, block.bytes());
    else
      device_tier->copy(moved, block, block.bytes());
    block = std::move(moved);
  }

  // `ahead`: an upload for a later moment, which compute waits for only at its first use (in
  // make_resident).
  void move_compute(int64_t k, Tier to, bool ahead = false) {
    Chunk& c = chunks[k];
    if (c.compute_tier == to) return;
    PSTAR_INTERNAL_ASSERT(!c.remote, "moving chunk ", k, ", which another rank owns");
    PSTAR_INTERNAL_ASSERT(!adam_queued(k), "moving chunk ", k, " while its host Adam is queued");
    PSTAR_INTERNAL_ASSERT(c.compute_count == 0, "moving chunk ", k, " while it is in use");
    const auto begin = std::chrono::steady_clock::now();
    moved_to(c.param, to, ahead);
    if (!reuse) moved_to(c.grad, to, ahead);
    c.awaiting = ahead;
    add_bytes(c.compute_tier, -compute_bytes());
    add_bytes(to, compute_bytes());
    (to == Tier::kDevice ? step.h2d : step.d2h) += compute_bytes();
    if (ahead) step.prefetched += compute_bytes();
    c.compute_tier = to;
    repoint(k);
    const double seconds = seconds_since(begin);
    step.move_s += seconds;
    record(
        k,
        to == Tier::kDevice ? formats::ChunkEventKind::kMoveH2D : formats::ChunkEventKind::kMoveD2H,
        compute_bytes(), seconds);
  }

  void move_optimizer_state(int64_t k, Tier to) {
    Chunk& c = chunks[k];
    if (c.optimizer_tier == to) return;
    const auto begin = std::chrono::steady_clock::now();
    for (Block* b : {&c.master, &c.exp_avg, &c.exp_avg_sq})
      if (*b) moved_to(*b, to);
    step.move_s += seconds_since(begin);
    add_bytes(c.optimizer_tier, -optimizer_bytes());
    add_bytes(to, optimizer_bytes());
    (to == Tier::kDevice ? step.h2d : step.d2h) += optimizer_bytes();
    c.optimizer_tier = to;
    record(
        k,
        to == Tier::kDevice ? formats::ChunkEventKind::kMoveH2D : formats::ChunkEventKind::kMoveD2H,
        optimizer_bytes());
  }

  void set_state(ManagedTensor& t, TensorState state) {
    Chunk& c = chunks[t.chunk];
    if (t.state == TensorState::kCompute && state != TensorState::kCompute) --c.compute_count;
    if (t.state != TensorState::kCompute && state == TensorState::kCompute) ++c.compute_count;
    t.state = state;
  }

  // ---- registration ------------------------------------------------------------------------

  void register_leaf(torch::nn::Module& module, const std::string& prefix, bool host_pinned) {
    auto params = module.named_parameters(/*recurse=*/false);
    int64_t numel = 0;
    for (const auto& p : params) numel += p.value().numel();
    PSTAR_INTERNAL_ASSERT(numel <= chunk_size, "module ", prefix, " was not in the chunk plan");
    // A chunk holds only embedding (host-pinned) or only other tensors.
    if (chunks.empty() || chunks.back().used + numel > chunk_size ||
        chunks.back().host_pinned != host_pinned) {
      next_chunk_host_pinned = host_pinned;
      new_chunk();
    }
    const int64_t k = static_cast<int64_t>(chunks.size()) - 1;
    torch::NoGradGuard no_grad;
    for (const auto& p : params) {
      ManagedTensor t;
      t.name = prefix + p.key();
      t.param = p.value();
      t.chunk = k;
      t.offset = chunks[k].used;
      t.shape = t.param.sizes().vec();
      t.numel = t.param.numel();
      PSTAR_CHECK(t.param.is_floating_point(), ConfigError, "parameter ", t.name, " has dtype ",
                  t.param.scalar_type(), "; parameters must be floating point");
      PSTAR_CHECK(t.param.requires_grad(), ConfigError, "parameter ", t.name,
                  " does not require grad; register frozen tensors as buffers instead");
      PSTAR_CHECK(tensor_by_name.count(t.name) == 0, ConfigError, "parameter ", t.name,
                  " is registered twice (tied weights must be one parameter used twice)");
      chunks[k].used += t.numel;
      if (!chunks[k].remote) {
        // Every rank builds the same initial model; only the owner keeps a chunk's values.
        master_view(t).copy_(t.param.detach());
        if (!fp32) param_view(t).copy_(t.param.detach());
      }
      const int64_t id = static_cast<int64_t>(tensors.size());
      t.param.register_hook([this, id](const torch::Tensor&) { on_grad(id); });
      tensor_by_name[t.name] = id;
      module_tensors[&module].push_back(id);
      chunks[k].tensors.push_back(id);
      tensors.push_back(std::move(t));
    }
    repoint(k);  // frees the module's original storage
    ++registered_leaves;
  }

  // ---- groups (Note [gathering]) ------------------------------------------------------------

  int64_t group_of(int64_t k) const { return sharding.group_of(k); }
  int64_t group_chunk(int64_t g, int64_t part) const { return sharding.first_of_group(g) + part; }

  // Gives the remote chunks of group g their payloads and fills them from their owners.
  void gather(int64_t g) {
    Group& group = groups[g];
    if (group.gathered) return;
    await_adam(group_chunk(g, sharding.rank));  // this rank sends its own chunk's parameters
    std::vector<void*> parts;
    for (int64_t part = 0; part < sharding.world_size; ++part) {
      const int64_t k = group_chunk(g, part);
      Chunk& c = chunks[k];
      if (c.remote) {
        c.param = allocate_payload(c.compute_tier, chunk_size * elem_bytes, !c.host_pinned);
        if (!reuse) c.grad = allocate_payload(c.compute_tier, chunk_size * 4, !c.host_pinned);
        add_bytes(c.compute_tier, compute_bytes());
        record(k, formats::ChunkEventKind::kAllocate, compute_bytes());
      }
      parts.push_back(c.param.data());
    }
    const auto begin = std::chrono::steady_clock::now();
    comm->all_gather(parts, chunk_size * elem_bytes);
    record(group_chunk(g, 0), formats::ChunkEventKind::kGather,
           (sharding.world_size - 1) * chunk_size * elem_bytes, seconds_since(begin));
    for (int64_t part = 0; part < sharding.world_size; ++part) {
      const int64_t k = group_chunk(g, part);
      if (chunks[k].remote) repoint(k);
    }
    group.gathered = true;
    ++step.gathers;
    check_host();
  }

  void release(int64_t g) {
    Group& group = groups[g];
    if (!group.gathered) return;
    PSTAR_INTERNAL_ASSERT(!group.grads_pending(), "releasing group ", g, " before its reduction");
    for (int64_t part = 0; part < sharding.world_size; ++part) {
      const int64_t k = group_chunk(g, part);
      Chunk& c = chunks[k];
      if (!c.remote) continue;
      PSTAR_INTERNAL_ASSERT(c.compute_count == 0, "releasing chunk ", k, " while it is in use");
      c.param.reset();
      c.grad.reset();
      add_bytes(c.compute_tier, -compute_bytes());
      repoint(k);
      record(k, formats::ChunkEventKind::kRelease, compute_bytes());
    }
    group.gathered = false;
  }

  // Sums group g's gradients over the ranks into each owner's gradient slot. Unscaled: grad_norm
  // and update divide by the world size.
  void reduce(int64_t g) {
    Group& group = groups[g];
    if (group.reduced) return;
    const int64_t mine = group_chunk(g, sharding.rank);
    reduced.resize(static_cast<size_t>(chunk_size));
    const auto begin = std::chrono::steady_clock::now();
    comm->reduce_scatter(
        chunk_size,
        [&](int64_t part, float* acc) {
          const Chunk& c = chunks[group_chunk(g, part)];
          if (!c.param || c.used == 0) return;  // never gathered: no gradient here
          auto dst = torch::from_blob(acc, {c.used}, torch::kFloat32);
          const auto type = reuse ? dtype : torch::kFloat32;
          dst.add_(torch::from_blob(reuse ? c.param.data() : c.grad.data(), {c.used},
                                    torch::dtype(type)));
        },
        reduced.data());
    const Chunk& own = chunks[mine];
    if (own.used > 0) {
      torch::NoGradGuard no_grad;
      auto src = torch::from_blob(reduced.data(), {own.used}, torch::kFloat32);
      torch::from_blob(reuse ? own.param.data() : own.grad.data(), {own.used},
                       torch::dtype(reuse ? dtype : torch::kFloat32))
          .copy_(src);
    }
    group.reduced = true;
    ++step.reductions;
    record(group_chunk(g, 0), formats::ChunkEventKind::kReduce,
           (sharding.world_size - 1) * chunk_size * 4, seconds_since(begin));
  }

  // A tensor of the group is between its module's pre-hook and its end of use (a tied weight
  // waits in kCompute for its gradient through the whole backward).
  bool in_use(int64_t g) const {
    for (int64_t part = 0; part < sharding.world_size; ++part)
      if (chunks[group_chunk(g, part)].compute_count > 0) return true;
    return false;
  }

  // Between moments: reduces the groups whose gradients are complete, then releases every
  // gathered group that `keep` does not hold.
  void settle_groups(const std::vector<bool>& keep) {
    if (comm == nullptr) return;
    for (int64_t g = 0; g < static_cast<int64_t>(groups.size()); ++g) {
      Group& group = groups[g];
      if (group.grads_pending() && group.grads_seen == group.tensors && !in_use(g)) {
        reduce(g);
        // Gradients are summed; in reuse mode the slots now hold them, so the copies of the
        // other ranks' chunks are stale: drop them.
        release(g);
      }
    }
    for (int64_t g = 0; g < static_cast<int64_t>(groups.size()); ++g) {
      if (groups[g].gathered && !groups[g].grads_pending() && !keep[g] && !in_use(g)) release(g);
    }
  }

  // The groups to keep gathered past moment t besides those it uses: while the warm-up runs,
  // none; afterwards, those used again before the pass (forward or backward) ends. One backward
  // sweep over the trace at plan time, so a moment only looks its answer up.
  void plan_kept_groups() {
    const auto moments = static_cast<int64_t>(record_groups.size());
    kept_after.assign(static_cast<size_t>(moments), {});
    for (int64_t t = moments - 2; t >= 0; --t) {
      const auto& next = record_groups[t + 1];
      if (record_backward[t + 1] != record_backward[t] || next.empty()) continue;
      std::vector<int64_t> merged;
      std::set_union(next.begin(), next.end(), kept_after[t + 1].begin(), kept_after[t + 1].end(),
                     std::back_inserter(merged));
      kept_after[t] = std::move(merged);
    }
  }

  int64_t remote_device_bytes() const {
    int64_t bytes = 0;
    for (const Chunk& c : chunks)
      bytes += c.remote && c.param && c.compute_tier == Tier::kDevice ? compute_bytes() : 0;
    return bytes;
  }

  // ---- hooks ---------------------------------------------------------------------------------

  // A moment begins: close the non-model window of the previous one (Note [placement]).
  void begin_moment(const std::string& what) {
    record_finished_adam();
    const int64_t reserved = device_tier->non_model_reserved_peak_bytes();
    const int64_t non_model = device_tier->reset_non_model_peak();
    // The window since the last optimizer step closed in end_step, which counted it for the step
    // it belongs to; a step's peak covers its own moments only (as a profile's rows do).
    if (moment >= 0) {
      step.device_peak = std::max(step.device_peak, interval_chunk_bytes + non_model);
      note_footprint(reserved);
    }
    if (profiler != nullptr) profiler->close_moment(non_model);
    if (moment >= 0) {
      record_non_model[moment] = std::max(record_non_model[moment], non_model);
    } else if (!trace.non_model_bytes.empty()) {
      // The window after last iteration's optimizer step ends here.
      auto& last_nm = trace.non_model_bytes.back();
      last_nm = std::max(last_nm, non_model);
    }
    PSTAR_CHECK(interval_chunk_bytes + non_model <= device_budget, OutOfMemoryError,
                "device tier over budget before ", what, ": chunks ",
                format_bytes(interval_chunk_bytes), " + non-model ", format_bytes(non_model),
                " > engine.device_memory ", format_bytes(device_budget),
                "; raise engine.device_memory, lower train_micro_batch_size_per_gpu, or turn on "
                "engine.activation_checkpointing");
    ++moment;
    record_accesses.emplace_back();
    record_groups.emplace_back();
    record_backward.push_back(in_backward);
    record_non_model.push_back(0);
    if (iteration == 0) moment_names.push_back(what);
  }

  const std::vector<int64_t>& tensors_of(torch::nn::Module& module) {
    auto it = module_tensors.find(&module);
    PSTAR_CHECK(it != module_tensors.end(), ConfigError, "a module (", module.name(),
                ") ran through run_module but its parameters are not managed by the chunk "
                "engine; build the model before training starts");
    return it->second;
  }

  // Makes `needed` resident on the device, evicting others as the plan says.
  void make_resident(const std::vector<int64_t>& needed, const std::string& what) {
    std::set<int64_t> need(needed.begin(), needed.end());
    std::vector<int64_t> candidates;  // resident, movable, not needed now
    int64_t resident = 0;
    for (int64_t k = 0; k < static_cast<int64_t>(chunks.size()); ++k) {
      const Chunk& c = chunks[k];
      if (c.remote || c.margin || c.compute_tier != Tier::kDevice) continue;
      ++resident;
      if (!need.count(k) && c.compute_count == 0) candidates.push_back(k);
    }
    int64_t missing = 0;
    for (int64_t k : need) missing += chunks[k].compute_tier == Tier::kHost ? 1 : 0;
    int64_t evict = static_cast<int64_t>(candidates.size());  // warm-up: keep only what is in use
    const int64_t t = moment;
    if (planned && t < trace.num_moments()) {
      const int64_t capacity = movable_capacity(t);
      evict = std::max<int64_t>(0, resident + missing - capacity);
      PSTAR_CHECK(evict <= static_cast<int64_t>(candidates.size()), OutOfMemoryError,
                  "device tier: ", what, " needs ", need.size(), " chunk(s) of ",
                  format_bytes(compute_bytes()),
                  " on the device, but after non-model memory and "
                  "the pinned margin only ",
                  capacity, " fit in engine.device_memory ", format_bytes(device_budget),
                  "; raise engine.device_memory or lower default_chunk_size");
      for (int64_t k : chunk::choose_evictions(*next_use, t, candidates, evict))
        move_compute(k, Tier::kHost);
    } else {
      for (int64_t k : candidates) move_compute(k, Tier::kHost);
    }
    for (int64_t k : need) {
      Chunk& c = chunks[k];
      if (c.remote) continue;
      move_compute(k, Tier::kDevice);
      if (c.awaiting) {
        // Copied ahead (Note [prefetch]): the module's compute, queued next, waits for it here.
        device_tier->await_copies(c.param);
        if (c.grad) device_tier->await_copies(c.grad);
        c.awaiting = false;
      }
    }
    PSTAR_CHECK(device_bytes <= device_budget, OutOfMemoryError, "device tier: ", what, " needs ",
                format_bytes(device_bytes),
                " of chunks on the device, more than "
                "engine.device_memory ",
                format_bytes(device_budget),
                "; raise engine.device_memory or lower default_chunk_size");
    interval_chunk_bytes = device_bytes;
  }

  // How many movable compute payloads fit on the device at moment t of the plan: the budget rule
  // (the larger non-model peak of t and t + 1) or the tier's capacity, less the margin and the
  // gathered copies.
  int64_t movable_capacity(int64_t t) const {
    int64_t pinned = 0;
    for (const Chunk& c : chunks) pinned += c.margin ? compute_bytes() + optimizer_bytes() : 0;
    const int64_t room = std::min(chunk::device_chunk_budget_bytes(trace, t, device_budget),
                                  device_tier->device_capacity_bytes()) -
                         pinned - remote_device_bytes();
    return std::max<int64_t>(0, room / compute_bytes());
  }

  // Note [prefetch]: once moment t's chunks are resident, the chunks the trace says moment t + 1
  // uses start their uploads, to run while t's module computes. Room comes first from free space,
  // then from evicting chunks furthest-next-use first; those are never used at t or t + 1, so
  // loading t + 1's chunk in their place is what the furthest-next-use order would do anyway.
  void prefetch(const std::vector<int64_t>& need_now) {
    const int64_t t = moment;
    // The last moment is the optimizer step, which keeps only the margin on the device.
    if (!config.engine.prefetch || !planned || t + 2 >= trace.num_moments()) return;
    const std::vector<int64_t>& next = trace.accesses[t + 1];
    std::vector<int64_t> wanted;
    for (int64_t k : next) {
      const Chunk& c = chunks[k];
      if (c.remote || c.host_pinned || c.compute_tier != Tier::kHost) continue;
      // A chunk whose Adam is still running waits for its module (Note [host adam overlap]):
      // blocking here would hold back the compute of the module before it.
      if (adam_queued(k)) {
        if (!adam_worker->done(adam_ticket[static_cast<size_t>(k)])) continue;
        await_adam(k);
      }
      wanted.push_back(k);
    }
    if (wanted.empty()) return;
    const auto listed = [](const std::vector<int64_t>& list, int64_t k) {
      return std::find(list.begin(), list.end(), k) != list.end();
    };
    std::vector<int64_t> candidates;  // resident, movable, used neither now nor next
    int64_t resident = 0;
    for (int64_t k = 0; k < static_cast<int64_t>(chunks.size()); ++k) {
      const Chunk& c = chunks[k];
      if (c.remote || c.margin || c.compute_tier != Tier::kDevice) continue;
      ++resident;
      if (c.compute_count == 0 && !listed(need_now, k) && !listed(next, k)) candidates.push_back(k);
    }
    const int64_t capacity = movable_capacity(t);
    const int64_t fetch = std::min(static_cast<int64_t>(wanted.size()),
                                   capacity - resident + static_cast<int64_t>(candidates.size()));
    if (fetch <= 0) return;
    const int64_t evict = std::max<int64_t>(0, resident + fetch - capacity);
    for (int64_t k : chunk::choose_evictions(*next_use, t, candidates, evict))
      move_compute(k, Tier::kHost);
    for (int64_t i = 0; i < fetch; ++i) move_compute(wanted[i], Tier::kDevice, /*ahead=*/true);
    interval_chunk_bytes = device_bytes;
  }

  void access(torch::nn::Module& module, const char* phase) {
    const auto& ids = tensors_of(module);
    std::vector<int64_t> needed;
    std::set<int64_t> used_groups;
    for (int64_t id : ids) {
      const int64_t k = tensors[id].chunk;
      used_groups.insert(group_of(k));
      if (!chunks[k].host_pinned && std::find(needed.begin(), needed.end(), k) == needed.end())
        needed.push_back(k);
    }
    const std::string what = str_cat(phase, " of ", tensors[ids.front()].name);
    begin_moment(what);
    // Before anything reads them: uploads, gathers, and modules computing on the host.
    for (int64_t id : ids) await_adam(tensors[id].chunk);
    if (in_backward) start_early_updates();
    if (comm != nullptr) {
      std::vector<bool> keep(groups.size(), false);
      for (int64_t g : used_groups) keep[g] = true;
      if (planned && moment < static_cast<int64_t>(kept_after.size()))
        for (int64_t g : kept_after[moment]) keep[g] = true;
      settle_groups(keep);
      for (int64_t g : used_groups) gather(g);
    }
    make_resident(needed, what);
    prefetch(needed);
    record_moment(what,
                  in_backward ? formats::ProfileStage::kBackward : formats::ProfileStage::kForward);
    record_accesses[moment] = needed;
    record_groups[moment].assign(used_groups.begin(), used_groups.end());
    for (int64_t id : ids) set_state(tensors[id], TensorState::kCompute);
  }

  void pre_forward(torch::nn::Module& module) override {
    const std::lock_guard<std::mutex> lock(hook_mutex);
    access(module, "forward");
  }
  void pre_backward(torch::nn::Module& module) override {
    const std::lock_guard<std::mutex> lock(hook_mutex);
    // The backward writes gradients into every chunk, used in the forward or not.
    if (!in_backward) await_queued_adam();
    in_backward = true;
    access(module, "backward");
  }
  void post_forward(torch::nn::Module& module) override {
    const std::lock_guard<std::mutex> lock(hook_mutex);
    for (int64_t id : tensors_of(module)) set_state(tensors[id], TensorState::kHoldAfterFwd);
  }

  // Runs just before autograd accumulates this tensor's gradient into its .grad, which views the
  // gradient slot. With reuse the slot still holds the parameter: clear it so the sum is the grad.
  void on_grad(int64_t id) {
    const std::lock_guard<std::mutex> lock(hook_mutex);
    ManagedTensor& t = tensors[id];
    if (reuse) {
      torch::NoGradGuard no_grad;
      param_view(t).zero_();
    }
    set_state(t, TensorState::kHoldAfterBwd);
    if (!t.grad_seen) {
      t.grad_seen = true;
      ++groups[group_of(t.chunk)].grads_seen;
    }
    if (!t.grad_arrived) {
      t.grad_arrived = true;
      --chunks[t.chunk].grads_missing;
    }
  }

  // A micro-batch begins: no gradient has arrived.
  void reset_grad_arrivals() {
    for (Chunk& c : chunks) c.grads_missing = static_cast<int64_t>(c.tensors.size());
    for (ManagedTensor& t : tensors) t.grad_arrived = false;
  }

  // ---- host Adam beside the next forward (Note [host adam overlap]) ----------------------------

  bool adam_queued(int64_t k) const {
    return static_cast<size_t>(k) < adam_ticket.size() && adam_ticket[static_cast<size_t>(k)] != 0;
  }

  // Chunk k's payloads are about to be touched: its queued Adam must have finished.
  void await_adam(int64_t k) {
    if (!adam_queued(k)) return;
    int64_t& ticket = adam_ticket[static_cast<size_t>(k)];
    if (adam_worker->done(ticket)) {
      adam_worker->wait(ticket);  // rethrows an Adam that failed
    } else {
      const auto begin = std::chrono::steady_clock::now();
      adam_worker->wait(ticket);
      step.adam_wait_s += seconds_since(begin);
    }
    ticket = 0;
  }

  void await_all_adam() {
    if (adam_worker == nullptr) return;
    for (int64_t k = 0; k < static_cast<int64_t>(adam_ticket.size()); ++k) await_adam(k);
    record_finished_adam();
  }

  // Waits for every queued Adam but this step's early ones, which run on through the backward and
  // the optimizer step into the next forward.
  void await_queued_adam() {
    if (adam_worker == nullptr) return;
    for (int64_t k = 0; k < static_cast<int64_t>(adam_ticket.size()); ++k)
      if (!chunks[k].early) await_adam(k);
    record_finished_adam();
  }

  // The profiler is the training thread's: the worker's finished Adam steps are recorded here.
  void record_finished_adam() {
    if (adam_worker == nullptr) return;
    std::vector<AdamDone> done;
    {
      const std::lock_guard<std::mutex> lock(adam_done_mutex);
      done.swap(adam_done);
    }
    for (const AdamDone& d : done)
      record(d.chunk, formats::ChunkEventKind::kAdamHost, optimizer_bytes(), d.seconds);
  }

  optim::AdamHyper adam_hyper(double lr, int64_t step_number) const {
    const auto& opt = config.optimizer;
    optim::AdamHyper hyper;
    hyper.lr = static_cast<float>(lr);
    hyper.beta1 = static_cast<float>(opt.betas[0]);
    hyper.beta2 = static_cast<float>(opt.betas[1]);
    hyper.eps = static_cast<float>(opt.eps);
    hyper.weight_decay = static_cast<float>(opt.weight_decay);
    hyper.decoupled = opt.type == "AdamW";
    hyper.step = step_number;
    return hyper;
  }

  // Reduced gradients are sums over the ranks: Adam takes their mean.
  float adam_multiplier(double grad_multiplier) const {
    return static_cast<float>(grad_multiplier / static_cast<double>(sharding.world_size));
  }

  optim::AdamSpan adam_span(Chunk& c) const {
    optim::AdamSpan span;
    span.master = static_cast<float*>(fp32 ? c.param.data() : c.master.data());
    span.exp_avg = static_cast<float*>(c.exp_avg.data());
    span.exp_avg_sq = static_cast<float*>(c.exp_avg_sq.data());
    span.grad = grad_data(c);
    span.grad_type = grad_type();
    span.param_out = fp32 ? nullptr : c.param.data();
    span.param_out_type = fp32                        ? optim::ParamOutType::kNone
                          : dtype == torch::kBFloat16 ? optim::ParamOutType::kBF16
                                                      : optim::ParamOutType::kF16;
    span.numel = c.used;
    PSTAR_INTERNAL_ASSERT(c.compute_tier == c.optimizer_tier, "chunk ", &c - chunks.data(),
                          "'s compute payloads are not beside its optimizer state");
    return span;
  }

  // Queues host chunk k's Adam on the worker; `with_sq`: first its gradient's sum of squares, into
  // early_sq. Without param/grad reuse the gradient payload is zeroed for the next step right after
  // its Adam, there too.
  void queue_host_adam(int64_t k, const optim::AdamHyper& hyper, float multiplier, bool with_sq) {
    Chunk& c = chunks[k];
    const optim::AdamSpan span = adam_span(c);
    tier::DeviceTier* tier = device_tier.get();
    if (with_sq) {
      double* out = &c.early_sq;
      c.sq_ticket = adam_worker->submit([tier, span, out] {
        *out = tier->grad_sq_sum(Tier::kHost, span.grad, span.grad_type, span.numel);
      });
    }
    Block* grad = reuse ? nullptr : &c.grad;
    Impl* impl = this;
    adam_ticket[static_cast<size_t>(k)] =
        adam_worker->submit([impl, tier, k, hyper, multiplier, span, grad] {
          const auto begin = std::chrono::steady_clock::now();
          tier->adam_step(Tier::kHost, hyper, multiplier, span);
          if (grad != nullptr) tier->zero(*grad, span.numel * 4);
          const double seconds = seconds_since(begin);
          const std::lock_guard<std::mutex> lock(impl->adam_done_mutex);
          impl->adam_done.push_back(AdamDone{k, seconds});
        });
    ++step.adam_queued;
  }

  // In the last micro-batch's backward, when the trainer said what the update will be: every host
  // chunk whose gradients are all in and no longer in use goes to the host now (it would at the
  // optimizer step anyway) and its sum of squares and Adam are queued, to run during the rest of
  // the backward. One rank only: with several, gradients are final only once reduced.
  void start_early_updates() {
    if (adam_worker == nullptr || !planned || !expected_update || comm != nullptr ||
        micro_batches_done + 1 != config.gradient_accumulation_steps)
      return;
    const optim::AdamHyper hyper = adam_hyper(expected_update->first, adam_steps + 1);
    const float multiplier = adam_multiplier(expected_update->second);
    for (int64_t k = 0; k < static_cast<int64_t>(chunks.size()); ++k) {
      Chunk& c = chunks[k];
      if (c.remote || c.margin || c.early || c.used == 0 || c.grads_missing > 0 ||
          c.compute_count > 0)
        continue;
      move_compute(k, Tier::kHost);
      c.early = true;
      ++step.adam_early;
      queue_host_adam(k, hyper, multiplier, /*with_sq=*/true);
    }
  }

  // The optimizer step begins: the previous step's queued Adam is done, and this step's early
  // chunks have their sums of squares.
  void await_for_optimizer() {
    await_queued_adam();
    for (Chunk& c : chunks) {
      if (c.sq_ticket == 0) continue;
      const auto begin = std::chrono::steady_clock::now();
      adam_worker->wait(c.sq_ticket);
      step.adam_wait_s += seconds_since(begin);
      c.sq_ticket = 0;
    }
  }

  // The chunks this rank owns, in the order a step's forward first needs them: the host-pinned
  // embedding's first (it runs first), then the trace's order (for a remote chunk, its group's:
  // gathering it sends this rank's chunk of the group), then any left.
  std::vector<int64_t> forward_order() const {
    std::vector<int64_t> order;
    std::vector<bool> listed(chunks.size(), false);
    const auto add = [&](int64_t k) {
      const int64_t own = group_chunk(group_of(k), sharding.rank);
      // The last group may be short of this rank's chunk.
      if (own >= static_cast<int64_t>(chunks.size()) || listed[static_cast<size_t>(own)]) return;
      listed[static_cast<size_t>(own)] = true;
      order.push_back(own);
    };
    for (int64_t k = 0; k < static_cast<int64_t>(chunks.size()); ++k)
      if (chunks[k].host_pinned) add(k);
    for (const auto& used : trace.accesses)
      for (int64_t k : used) add(k);
    for (int64_t k = 0; k < static_cast<int64_t>(chunks.size()); ++k) add(k);
    return order;
  }

  // ---- optimizer -----------------------------------------------------------------------------

  // The optimizer moment: margin chunks are updated on the device, the rest on the host.
  void optimizer_moment() {
    await_for_optimizer();
    in_backward = false;
    begin_moment("optimizer step");
    for (int64_t g = 0; g < static_cast<int64_t>(groups.size()); ++g) release(g);
    std::vector<int64_t> on_device;
    for (int64_t k = 0; k < static_cast<int64_t>(chunks.size()); ++k) {
      if (chunks[k].remote) continue;
      if (chunks[k].margin)
        on_device.push_back(k);
      else
        move_compute(k, Tier::kHost);
    }
    record_accesses[moment] = on_device;
    interval_chunk_bytes = device_bytes;
    record_moment("optimizer step", formats::ProfileStage::kOptimizer);
  }

  const void* grad_data(const Chunk& c) const { return reuse ? c.param.data() : c.grad.data(); }
  optim::GradType grad_type() const {
    if (!reuse) return optim::GradType::kF32;
    return dtype == torch::kBFloat16 ? optim::GradType::kBF16 : optim::GradType::kF16;
  }

  // After the warm-up: fix the margin and build the next-use index (Note [placement]).
  void plan() {
    trace.accesses = record_accesses;
    trace.non_model_bytes = record_non_model;
    plan_kept_groups();
    const int64_t num = static_cast<int64_t>(chunks.size());
    int64_t max_non_model = 0;
    int64_t max_needed = 0;
    for (int64_t t = 0; t < trace.num_moments(); ++t) {
      max_non_model = std::max(max_non_model, trace.non_model_bytes[t]);
      max_needed = std::max<int64_t>(max_needed, static_cast<int64_t>(trace.accesses[t].size()));
    }
    const int64_t whole = compute_bytes() + optimizer_bytes();
    const double usable = std::min(plan::kDeviceFillRatio * static_cast<double>(device_budget) -
                                       static_cast<double>(max_non_model),
                                   static_cast<double>(device_tier->device_capacity_bytes()));
    int64_t margin = 0;
    int64_t movable = 0;
    for (const Chunk& c : chunks) movable += c.host_pinned || c.remote ? 0 : 1;
    if (static_cast<double>(movable * whole) <= usable) {
      margin = movable;
    } else {
      // Keep room for the largest working set of the chunks that stay movable, plus one spare.
      const double left = usable - static_cast<double>((max_needed + 1) * compute_bytes());
      margin =
          std::clamp<int64_t>(static_cast<int64_t>(left / static_cast<double>(whole)), 0, movable);
    }
    // Chunks placed on the device at start-up (Note [fit]) are in the margin already.
    int64_t given = 0;
    for (const Chunk& c : chunks) given += c.margin ? 1 : 0;
    const int64_t fixed = given;
    for (int64_t k = 0; k < num && given < margin; ++k) {
      if (chunks[k].host_pinned || chunks[k].margin || chunks[k].remote) continue;
      chunks[k].margin = true;
      ++given;
      // The margin is permanent device memory: count it against the budget now.
      move_optimizer_state(k, Tier::kDevice);
      move_compute(k, Tier::kDevice);
    }
    // The host blocks the margin left stay free for good (Note [exact-size host pool]).
    if (given > fixed) device_tier->trim();
    // The optimizer moment now keeps the margin on the device.
    trace.accesses.back().clear();
    for (int64_t k = 0; k < num; ++k)
      if (chunks[k].margin) trace.accesses.back().push_back(k);
    next_use.emplace(trace, num);
    adam_order = forward_order();
    adam_ticket.assign(chunks.size(), 0);
    planned = true;
    log::info("chunk plan after warm-up: ", trace.num_moments(), " moments, peak non-model ",
              format_bytes(max_non_model), ", ", given, " of ", num,
              " chunks in the device margin (Adam on the device; ", fixed,
              " of them placed there at start-up), working set up to ", max_needed, " chunk(s) of ",
              format_bytes(compute_bytes()));
  }
};

ChunkedEngine::ChunkedEngine(const config::TrainConfig& config, c10::ScalarType compute_dtype,
                             const std::vector<LeafModule>& leaves, int64_t predicted_non_model,
                             dist::Communicator* comm,
                             std::unique_ptr<tier::DeviceTier> device_tier)
    : impl_(std::make_unique<Impl>(config, compute_dtype, comm, std::move(device_tier))) {
  Impl& s = *impl_;
  // Gathers and reductions go through Gloo over host memory (Note [ring collectives]).
  PSTAR_CHECK(comm == nullptr || s.device_tier->compute_device().is_cpu(), ConfigError,
              "training on ", comm != nullptr ? comm->world_size() : 1,
              " ranks with the device tier ", s.device_tier->describe(),
              " needs NCCL collectives, which this build of pstar does not have; train on one rank "
              "or with --device cpu");
  s.expected_leaves = static_cast<int64_t>(leaves.size());
  const plan::ChunkLayout layout = plan::plan_layout(
      leaves, plan::LayoutOptions{config.default_chunk_size, config.engine.chunk_size_search,
                                  config.use_cpu_embedding});
  switch (layout.choice) {
    case plan::ChunkLayout::Choice::kConfigured:
      break;
    case plan::ChunkLayout::Choice::kSearched:
    case plan::ChunkLayout::Choice::kShrunk:
      if (layout.choice == plan::ChunkLayout::Choice::kShrunk)
        log::info("default_chunk_size ", config.default_chunk_size, " exceeds the model's ",
                  layout.params, " parameters; choosing a smaller chunk size");
      log::info("chunk size search: ", layout.chunk_size, " elements (", layout.num_chunks,
                " chunks, ", layout.padding_elements(), " elements of padding) among ",
                layout.searched_lo, "..", layout.searched_hi);
      break;
    case plan::ChunkLayout::Choice::kRaised:
      log::warn("default_chunk_size ", config.default_chunk_size,
                " is smaller than the largest module (", layout.largest_leaf,
                " parameters); raising the chunk size to ", layout.chunk_size, " elements");
      break;
  }
  s.chunk_size = layout.chunk_size;
  const int64_t world = s.sharding.world_size;
  PSTAR_CHECK(layout.num_chunks >= world, ConfigError, "the model fits in ", layout.num_chunks,
              " chunk(s) of ", layout.chunk_size, " elements, fewer than the ", world,
              " ranks that would each own one; lower default_chunk_size (e.g. to ",
              std::max<int64_t>(1, layout.params / world), ") or use fewer ranks");

  // Tier budgets and the fit check (Note [fit]), before anything is allocated.
  const plan::Budgets budgets = plan::config_budgets(config);
  const int64_t ranks_per_host = comm != nullptr ? comm->world().local_world_size : 1;
  s.device_budget = budgets.device;
  s.host_budget = budgets.host / ranks_per_host;  // the ranks on a host share its budget
  plan::FitInput in;
  in.layout = layout;
  in.payload = s.payload;
  in.world_size = world;
  in.ranks_per_host = ranks_per_host;
  in.device_budget = s.device_budget;
  in.host_budget = budgets.host;
  in.non_model = predicted_non_model;
  s.fit = plan::check_fit(in);
  if (!s.fit.fits) {
    PSTAR_THROW(OutOfMemoryError, s.fit.reason, " (engine.device_memory ",
                format_bytes(s.device_budget), ", engine.host_memory ", format_bytes(s.host_budget),
                "; `pstar estimate --config` shows the breakdown)");
  }
  s.first_device_chunk = s.fit.host_chunks;
  // Note [host adam overlap]: "auto" overlaps where the host is free while the device computes.
  const bool overlap = plan::overlap_adam_on(
      config.engine.overlap_adam,
      s.device_tier->compute_device().is_cuda() ? plan::DeviceKind::kCuda : plan::DeviceKind::kCpu);
  if (overlap) s.adam_worker = std::make_unique<core::OrderedWorker>();
  const int64_t capacity = s.device_tier->device_capacity_bytes();
  PSTAR_CHECK(s.fit.device_chunks <= capacity / s.whole_bytes(), OutOfMemoryError,
              s.fit.device_chunks, " chunks must start on the device tier (",
              format_bytes(s.fit.device_chunks * s.whole_bytes()), ") but it holds ",
              format_bytes(capacity),
              " of chunks; raise engine.device_memory or engine.host_memory");
  log::info("chunk plan: ", layout.num_chunks, " chunks of ", layout.chunk_size, " elements, ",
            s.payload.whole(), " bytes per parameter (",
            s.reuse ? "param/grad reuse" : "separate fp32 gradients", "), model data ",
            format_bytes(layout.num_chunks * s.whole_bytes()),
            world > 1 ? str_cat(", ", s.fit.owned_chunks, " chunks (",
                                format_bytes(s.fit.owned_chunks * s.whole_bytes()),
                                ") owned by each of ", world, " ranks")
                      : std::string(),
            "; ", s.fit.host_chunks, " chunks on the host tier (", format_bytes(s.host_budget),
            "), ", s.fit.device_chunks, " on the device tier (", format_bytes(s.device_budget),
            ", ", s.device_tier->describe(), "); predicted non-model peak ",
            format_bytes(predicted_non_model));
}

ChunkedEngine::~ChunkedEngine() = default;

int64_t ChunkedEngine::device_arena_bytes(const config::TrainConfig& config,
                                          int64_t predicted_non_model) {
  const int64_t budget = plan::config_budgets(config).device;
  const auto unfilled =
      static_cast<int64_t>((1.0 - plan::kDeviceFillRatio) * static_cast<double>(budget));
  const int64_t reserve = std::max(predicted_non_model, unfilled);
  PSTAR_CHECK(reserve < budget, OutOfMemoryError, "engine.device_memory ", format_bytes(budget),
              " leaves nothing for chunks after ", format_bytes(reserve),
              " of predicted activations and temporaries; raise engine.device_memory, lower "
              "train_micro_batch_size_per_gpu, or turn on engine.activation_checkpointing");
  return budget - reserve;
}

tier::DeviceTier& ChunkedEngine::device_tier() { return *impl_->device_tier; }

model::ModuleHooks* ChunkedEngine::hooks() { return impl_.get(); }
const chunk::AccessTrace& ChunkedEngine::trace() const { return impl_->trace; }
int64_t ChunkedEngine::compute_chunk_bytes() const { return impl_->compute_bytes(); }
int64_t ChunkedEngine::optimizer_chunk_bytes() const { return impl_->optimizer_bytes(); }
int64_t ChunkedEngine::device_budget_bytes() const { return impl_->device_budget; }
const plan::Fit& ChunkedEngine::fit() const { return impl_->fit; }
int64_t ChunkedEngine::margin_chunks() const {
  int64_t n = 0;
  for (const Chunk& c : impl_->chunks) n += c.margin ? 1 : 0;
  return n;
}
int64_t ChunkedEngine::chunk_size() const { return impl_->chunk_size; }
int64_t ChunkedEngine::num_chunks() const { return static_cast<int64_t>(impl_->chunks.size()); }

namespace {

// The leaf modules that own parameters, with their names relative to `unit`: one walk serves
// both the chunk plan and the registration, so the two always agree.
template <typename Fn>
void for_each_leaf(torch::nn::Module& unit, Fn&& fn) {
  for (const auto& item : unit.named_modules("", /*include_self=*/true)) {
    torch::nn::Module& leaf = *item.value();
    const auto params = leaf.named_parameters(/*recurse=*/false);
    if (params.is_empty()) continue;
    int64_t numel = 0;
    for (const auto& p : params) numel += p.value().numel();
    const bool embedding = dynamic_cast<model::GptEmbedding*>(&leaf) != nullptr;
    fn(leaf, item.key(), LeafModule{numel, embedding});
  }
}

}  // namespace

std::vector<LeafModule> ChunkedEngine::leaf_modules(torch::nn::Module& unit) {
  std::vector<LeafModule> leaves;
  for_each_leaf(unit, [&](torch::nn::Module&, const std::string&, const LeafModule& leaf) {
    leaves.push_back(leaf);
  });
  return leaves;
}

void ChunkedEngine::register_unit(torch::nn::Module& unit, const std::string& prefix) {
  impl_->sample_startup();
  for_each_leaf(unit,
                [&](torch::nn::Module& leaf, const std::string& name, const LeafModule& spec) {
                  impl_->register_leaf(leaf, name.empty() ? prefix : prefix + name + ".",
                                       spec.embedding && impl_->config.use_cpu_embedding);
                  impl_->sample_startup();
                });
}

int64_t ChunkedEngine::startup_peak_bytes() const { return impl_->startup_peak; }

void ChunkedEngine::load_parameter(const std::string& name, const at::Tensor& value) {
  Impl& s = *impl_;
  auto it = s.tensor_by_name.find(name);
  PSTAR_INTERNAL_ASSERT(it != s.tensor_by_name.end(), "unknown parameter ", name);
  const ManagedTensor& t = s.tensors[it->second];
  if (s.chunks[t.chunk].remote) return;  // its owner loads it
  s.await_adam(t.chunk);
  torch::NoGradGuard no_grad;
  s.master_view(t).copy_(value);
  if (!s.fp32) s.param_view(t).copy_(value);
}

void ChunkedEngine::finish_registration() {
  Impl& s = *impl_;
  PSTAR_INTERNAL_ASSERT(s.registered_leaves == s.expected_leaves, "registered ",
                        s.registered_leaves, " modules, planned ", s.expected_leaves);
  // Every group has one chunk per rank: empty chunks pad the last one.
  while (static_cast<int64_t>(s.chunks.size()) % s.sharding.world_size != 0) {
    s.next_chunk_host_pinned = false;
    s.new_chunk();
  }
  s.groups.assign(static_cast<size_t>(s.chunks.size() / s.sharding.world_size), Group{});
  for (const auto& t : s.tensors) ++s.groups[s.group_of(t.chunk)].tensors;
  // Remote chunks start released: their tensors hold nothing until gathered.
  for (int64_t k = 0; k < static_cast<int64_t>(s.chunks.size()); ++k)
    if (s.chunks[k].remote) s.repoint(k);
  int64_t used = 0;
  for (const Chunk& c : s.chunks) used += c.used;
  const int64_t capacity = static_cast<int64_t>(s.chunks.size()) * s.chunk_size;
  const int64_t model_data =
      static_cast<int64_t>(s.chunks.size()) * (s.compute_bytes() + s.optimizer_bytes());
  const int64_t n = static_cast<int64_t>(s.chunks.size());
  log::info(
      "chunks: ", n, " x {param ", s.fp32 ? "fp32" : c10::toString(s.dtype), s.reuse ? "+grad" : "",
      s.reuse ? "" : ", grad fp32", s.fp32 ? "" : ", master fp32",
      ", momentum fp32, variance fp32} = ", n * (s.reuse ? 4 : 5) - (s.fp32 ? n : 0),
      " payloads holding ", used, " parameters; ", capacity - used, " elements (",
      format_bytes((capacity - used) * (s.compute_bytes() + s.optimizer_bytes()) / s.chunk_size),
      ") of padding");
  log::info("start-up peak: ", format_bytes(s.startup_peak), " of host memory for ",
            format_bytes(model_data), " of model data (units taken into chunks as they are built)");
}

void ChunkedEngine::set_profiler(Profiler* profiler) {
  impl_->profiler = profiler;
  if (profiler == nullptr) return;
  const Impl& s = *impl_;
  profiler->set_chunk_bytes(s.device_bytes, s.host_bytes);
  formats::ProfileRun& run = profiler->data().run;
  run.chunk_size = s.chunk_size;
  run.num_chunks = static_cast<int64_t>(s.chunks.size());
  run.compute_bytes_per_chunk = s.compute_bytes();
  run.optimizer_bytes_per_chunk = s.optimizer_bytes();
  run.device_budget = s.device_budget;
  run.host_budget = s.host_budget;
  run.world_size = s.sharding.world_size;
  run.rank = s.sharding.rank;
  run.warmup_iterations = s.config.engine.warmup_iterations;
  formats::ProfileChunks& table = profiler->data().chunks;
  table = formats::ProfileChunks{};
  for (int64_t k = 0; k < static_cast<int64_t>(s.chunks.size()); ++k) {
    const Chunk& c = s.chunks[k];
    table.id.push_back(k);
    table.numel.push_back(c.used);
    table.capacity.push_back(s.chunk_size);
    table.group.push_back(s.sharding.group_of(k));
    table.owner.push_back(s.sharding.owner_of(k));
    table.embedding.push_back(c.host_pinned ? 1 : 0);
    table.payloads.push_back(str_cat("param", s.reuse ? "+grad" : ",grad", s.fp32 ? "" : ",master",
                                     ",exp_avg,exp_avg_sq"));
  }
}

int64_t ChunkedEngine::num_parameters() const {
  int64_t n = 0;
  for (const auto& t : impl_->tensors) n += t.numel;
  return n;
}

std::string ChunkedEngine::describe() const {
  const Impl& s = *impl_;
  return str_cat("chunked (", s.chunks.size(), " chunks of ", s.chunk_size, " elements, device ",
                 format_bytes(s.device_budget), " ", s.device_tier->describe(), ", host ",
                 format_bytes(s.host_budget), ")");
}

void ChunkedEngine::begin_step() {
  Impl& s = *impl_;
  // What ran between steps (model set-up before the first, a checkpoint's copies) is not this
  // step's non-model memory: the first moment's window starts here.
  s.device_tier->reset_non_model_peak();
  s.step = StepStats{};
  s.step.host_peak = s.host_bytes;
  s.step.tier_syncs_before = s.device_tier->own_synchronizations();
  s.moment = -1;
  s.record_accesses.clear();
  s.record_non_model.clear();
  s.expected_update.reset();
  s.micro_batches_done = 0;
  s.reset_grad_arrivals();
}

void ChunkedEngine::expect_update(double lr, double grad_multiplier) {
  impl_->expected_update = std::make_pair(lr, grad_multiplier);
}

void ChunkedEngine::end_micro_batch() {
  Impl& s = *impl_;
  s.await_queued_adam();  // a model whose backward ran no module hook has not waited yet
  ++s.micro_batches_done;
  s.reset_grad_arrivals();
  // Host code below may touch payloads (zeroing a host slot, Gloo's buffers): queued copies finish
  // first. Only then: a whole-device synchronisation every micro-batch would stall the GPU's queue
  // for nothing (issue 20, item 7), and device-side slots are zeroed on the compute stream, in
  // order with the copies.
  // A parameter no loss depends on gets no gradient: its slot must read as zero.
  std::vector<ManagedTensor*> gradless;
  bool host_touched = s.comm != nullptr;
  for (auto& t : s.tensors) {
    if (t.state != TensorState::kCompute && t.state != TensorState::kHoldAfterFwd) continue;
    gradless.push_back(&t);
    const Chunk& c = s.chunks[t.chunk];
    if (s.reuse && c.param && c.compute_tier == Tier::kHost) host_touched = true;
  }
  if (host_touched) s.synchronize_tier();
  torch::NoGradGuard no_grad;
  for (ManagedTensor* t : gradless) {
    if (s.reuse && s.chunks[t->chunk].param) s.param_view(*t).zero_();
    s.set_state(*t, TensorState::kHoldAfterBwd);
  }
  s.in_backward = false;
  if (s.comm == nullptr) return;
  // Every group's gradients go to their owners before the next micro-batch or the optimizer.
  for (int64_t g = 0; g < static_cast<int64_t>(s.groups.size()); ++g) {
    s.reduce(g);
    s.release(g);
  }
  for (auto& g : s.groups) g = Group{false, false, g.tensors, 0};
  for (auto& t : s.tensors) t.grad_seen = false;
}

double ChunkedEngine::grad_norm(double loss_scale) {
  Impl& s = *impl_;
  s.optimizer_moment();
  // The device side's sums first, all queued and waited for once, while the evictions the
  // optimizer moment queued are still under way; then the host side's, each waiting only for its
  // own chunk's copy. They are added in chunk order whatever the sides, so placement does not
  // change the norm's bits.
  std::vector<double> sums(s.chunks.size(), 0.0);
  for (Tier side : {Tier::kDevice, Tier::kHost}) {
    std::vector<size_t> summed;
    std::vector<tier::DeviceTier::GradRef> grads;
    for (size_t k = 0; k < s.chunks.size(); ++k) {
      const Chunk& c = s.chunks[k];
      if (c.remote || c.compute_tier != side) continue;
      // An early chunk's sum came from the worker, by the same function on the same bytes.
      if (c.early) {
        sums[k] = c.early_sq;
        continue;
      }
      summed.push_back(k);
      grads.push_back(tier::DeviceTier::GradRef{s.grad_data(c), s.grad_type(), c.used});
    }
    if (grads.empty()) continue;
    std::vector<double> out(grads.size());
    s.device_tier->grad_sq_sums(side, grads, out.data());
    for (size_t i = 0; i < summed.size(); ++i) sums[summed[i]] = out[i];
  }
  double sum = 0;
  for (double part : sums) sum += part;
  if (s.comm != nullptr) sum = s.comm->all_reduce_sum(sum);
  // Reduced gradients are sums over the ranks; the step's gradient is their mean.
  return std::sqrt(sum) / (loss_scale * static_cast<double>(s.sharding.world_size));
}

void ChunkedEngine::update(double lr, double grad_multiplier) {
  Impl& s = *impl_;
  PSTAR_INTERNAL_ASSERT(!s.expected_update || (s.expected_update->first == lr &&
                                               s.expected_update->second == grad_multiplier),
                        "the update differs from the one expected before the backward");
  const optim::AdamHyper hyper = s.adam_hyper(lr, ++s.adam_steps);
  s.updated = true;
  // The device tier's Adam gives host Adam's bits (Note [device tier]), so placement never changes
  // the numbers.
  const float multiplier = s.adam_multiplier(grad_multiplier);
  // The margin's Adam first: on a GPU it is queued and runs while the host updates the rest, each
  // host chunk as soon as its own eviction has landed. Chunks are independent, so the order does
  // not change the numbers.
  for (Chunk& c : s.chunks) {
    if (c.remote || c.optimizer_tier != Tier::kDevice) continue;
    const auto begin = std::chrono::steady_clock::now();
    s.device_tier->adam_step(Tier::kDevice, hyper, multiplier, s.adam_span(c));
    ++s.step.adam_device_chunks;
    s.record(&c - s.chunks.data(), formats::ChunkEventKind::kAdamDevice, s.optimizer_bytes(),
             seconds_since(begin));
  }
  // After the warm-up, with engine.overlap_adam, the host's share goes to the worker in the order
  // the next forward needs it (Note [host adam overlap]); the warm-up's last update comes before
  // the plan moves the margin's optimizer state, so it runs here.
  const bool queue = s.adam_worker != nullptr && s.planned;
  std::vector<int64_t> in_chunk_order;
  if (!queue)
    for (int64_t k = 0; k < static_cast<int64_t>(s.chunks.size()); ++k) in_chunk_order.push_back(k);
  for (int64_t k : queue ? s.adam_order : in_chunk_order) {
    Chunk& c = s.chunks[k];
    if (c.remote || c.optimizer_tier != Tier::kHost || c.early) continue;
    if (queue) {
      s.queue_host_adam(k, hyper, multiplier, /*with_sq=*/false);
      continue;
    }
    const auto begin = std::chrono::steady_clock::now();
    s.device_tier->adam_step(Tier::kHost, hyper, multiplier, s.adam_span(c));
    s.record(k, formats::ChunkEventKind::kAdamHost, s.optimizer_bytes(), seconds_since(begin));
  }
}

void ChunkedEngine::end_step() {
  Impl& s = *impl_;
  s.record_finished_adam();
  if (!s.reuse) {
    // The worker zeroes the gradients of the chunks whose Adam it runs.
    for (int64_t k = 0; k < static_cast<int64_t>(s.chunks.size()); ++k) {
      Chunk& c = s.chunks[k];
      if (!c.remote && !s.adam_queued(k)) s.device_tier->zero(c.grad, c.used * 4);
    }
  } else if (!s.updated) {
    // A skipped update (fp16 overflow) leaves gradients in the parameter slots: restore the
    // parameters from the masters (Note [param/grad reuse]), with LibTorch on host payloads too.
    s.synchronize_tier();
    torch::NoGradGuard no_grad;
    for (auto& t : s.tensors)
      if (!s.chunks[t.chunk].remote) s.param_view(t).copy_(s.master_view(t));
  }
  s.updated = false;
  s.expected_update.reset();
  for (Chunk& c : s.chunks) c.early = false;
  for (auto& t : s.tensors) s.set_state(t, TensorState::kHold);
  ++s.iteration;
  if (!s.planned) {
    // Several warm-up iterations: keep each moment's highest non-model peak.
    if (s.warmup_non_model.size() == s.record_non_model.size()) {
      for (size_t t = 0; t < s.record_non_model.size(); ++t)
        s.record_non_model[t] = std::max(s.record_non_model[t], s.warmup_non_model[t]);
    }
    s.warmup_non_model = s.record_non_model;
    if (s.iteration >= s.config.engine.warmup_iterations) s.plan();
  } else if (static_cast<int64_t>(s.record_non_model.size()) == s.trace.num_moments()) {
    // Later iterations keep the record current: non-model peaks only ever raise the plan's.
    for (int64_t t = 0; t < s.trace.num_moments(); ++t)
      s.trace.non_model_bytes[t] = std::max(s.trace.non_model_bytes[t], s.record_non_model[t]);
  }
  s.step.device_peak = std::max(s.step.device_peak, s.device_bytes);
  // The optimizer step's window is this step's too (the next step's first moment restarts it).
  s.step.device_peak =
      std::max(s.step.device_peak, s.interval_chunk_bytes + s.device_tier->non_model_peak_bytes());
  s.note_footprint(s.device_tier->non_model_reserved_peak_bytes());
  s.step.device_reserved_peak = std::max(s.step.device_reserved_peak, s.step.device_peak);
  s.step.syncs += s.device_tier->own_synchronizations() - s.step.tier_syncs_before;
  if (s.step.device_reserved_peak > s.device_budget && !s.warned_footprint) {
    // The plan keeps chunks and live allocations under the budget; what the device holds beyond
    // them (the caching allocator's freed blocks, the tier's scratch) is outside its control.
    s.warned_footprint = true;
    log::warn(
        "the device held ", format_bytes(s.step.device_reserved_peak), " at most in step ",
        s.iteration, " (chunk payloads ",
        format_bytes(s.device_tier->footprint().payload_reserve_bytes > 0
                         ? s.device_tier->footprint().payload_reserve_bytes
                         : s.step.device_peak),
        ", LibTorch's reserved memory and the tier's scratch), more than engine.device_memory ",
        format_bytes(s.device_budget),
        "; LibTorch's caching allocator keeps freed memory: lower "
        "train_micro_batch_size_per_gpu, turn on engine.activation_checkpointing, or set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
  }
  // Every gathered copy is released by now: what is left is this rank's own model data.
  s.step.model_data = s.device_bytes + s.host_bytes;
  s.check_host_pools();
  s.last = s.step;
}

void ChunkedEngine::state_dict(TensorList& out) {
  Impl& s = *impl_;
  s.await_all_adam();
  s.synchronize_tier();
  // Copies on the host, whichever side a payload is on.
  const auto host_copy = [](const torch::Tensor& view) {
    return view.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  };
  // Each rank writes the chunks it owns (Note [chunk layout]).
  for (const auto& t : s.tensors) {
    if (!s.sharding.owns(t.chunk)) continue;
    const Chunk& c = s.chunks[t.chunk];
    out.emplace_back(t.name, host_copy(s.master_view(t)));
    out.emplace_back(checkpoint::exp_avg_of(t.name),
                     host_copy(s.view(c.exp_avg, torch::kFloat32, t.offset, t.shape)));
    out.emplace_back(checkpoint::exp_avg_sq_of(t.name),
                     host_copy(s.view(c.exp_avg_sq, torch::kFloat32, t.offset, t.shape)));
  }
  out.emplace_back(checkpoint::kAdamStep, torch::tensor(s.adam_steps, torch::kInt64));
}

void ChunkedEngine::load_state_dict(const TensorMap& in, const std::string& file) {
  Impl& s = *impl_;
  s.await_all_adam();
  s.synchronize_tier();
  torch::NoGradGuard no_grad;
  s.adam_steps = checkpoint::checkpoint_tensor(in, checkpoint::kAdamStep, file, {}, torch::kInt64)
                     .item<int64_t>();
  for (const auto& t : s.tensors) {
    if (!s.sharding.owns(t.chunk)) continue;
    const Chunk& c = s.chunks[t.chunk];
    s.master_view(t).copy_(
        checkpoint::checkpoint_tensor(in, t.name, file, t.shape, torch::kFloat32));
    if (!s.fp32) s.param_view(t).copy_(s.master_view(t));
    s.view(c.exp_avg, torch::kFloat32, t.offset, t.shape)
        .copy_(checkpoint::checkpoint_tensor(in, checkpoint::exp_avg_of(t.name), file, t.shape,
                                             torch::kFloat32));
    s.view(c.exp_avg_sq, torch::kFloat32, t.offset, t.shape)
        .copy_(checkpoint::checkpoint_tensor(in, checkpoint::exp_avg_sq_of(t.name), file, t.shape,
                                             torch::kFloat32));
  }
}

void ChunkedEngine::fill_metrics(StepMetrics& m) {
  const Impl& s = *impl_;
  m.device_peak_bytes = s.last.device_peak;
  m.device_reserved_peak_bytes = s.last.device_reserved_peak;
  m.device_syncs = s.last.syncs;
  m.host_peak_bytes = s.last.host_peak;
  m.moved_h2d_bytes = s.last.h2d;
  m.moved_d2h_bytes = s.last.d2h;
  m.move_s = s.last.move_s;
  m.prefetched_h2d_bytes = s.last.prefetched;
  m.adam_device_chunks = s.last.adam_device_chunks;
  if (s.adam_worker != nullptr) {
    m.adam_queued_chunks = s.last.adam_queued;
    m.adam_early_chunks = s.last.adam_early;
    m.adam_wait_s = s.last.adam_wait_s;
  }
  m.model_data_bytes = s.last.model_data;
  const tier::DeviceTier::HostMemory held = s.device_tier->host_memory();
  m.pinned_bytes = held.pinned.current;
  m.pinned_peak_bytes = held.pinned.peak;
  m.pageable_bytes = held.pageable.current;
  m.pageable_peak_bytes = held.pageable.peak;
  if (s.comm != nullptr) {
    const dist::CommStats comm = s.comm->take_stats();
    m.comm_bytes = comm.bytes_sent;
    m.comm_s = comm.seconds;
    m.gathers = s.last.gathers;
    m.reductions = s.last.reductions;
  }
}

}  // namespace pstar::train
