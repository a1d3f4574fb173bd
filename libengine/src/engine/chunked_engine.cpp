// The chunk engine's set-up (layout, fit, registration) and its ParamEngine calls. The moments
// are in moments.cpp; the parts each own one job (README.md).
#include "pstar/engine/chunked_engine.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "chunked_engine_impl.h"
#include "compute_dtype.h"
#include "evaluation.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/base/strings.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/core/random_id.h"
#include "pstar/dist/communicator.h"
#include "pstar/nvme/aligned_buffer.h"
#include "pstar/nvme/store.h"
#include "pstar/plan/run_plan.h"

namespace pstar::engine {
namespace {

namespace ckpt = checkpoint;
using checkpoint::checkpoint_tensor;

ChunkFormat chunk_format(const plan::RunPlan& plan, int64_t chunk_size) {
  ChunkFormat f;
  f.dtype = compute_dtype(plan.precision);
  f.elem_bytes = static_cast<int64_t>(c10::elementSize(f.dtype));
  f.fp32 = f.dtype == torch::kFloat32;
  f.reuse = !f.fp32 && plan.accumulation == 1;
  f.payload = plan::payload_bytes(f.elem_bytes, plan.accumulation > 1);
  f.chunk_size = chunk_size;
  return f;
}

optim::AdamHyper adam_settings(const plan::RunPlan& plan) {
  const auto& opt = plan.config.optimizer;
  optim::AdamHyper hyper;
  hyper.beta1 = static_cast<float>(opt.betas[0]);
  hyper.beta2 = static_cast<float>(opt.betas[1]);
  hyper.eps = static_cast<float>(opt.eps);
  hyper.weight_decay = static_cast<float>(opt.weight_decay);
  hyper.decoupled = opt.type == "AdamW";
  return hyper;
}

std::string padding_percent(const plan::ChunkLayout& layout) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f%% of the chunks",
                100.0 * static_cast<double>(layout.padding_elements()) /
                    static_cast<double>(layout.total_elements()));
  return text;
}

plan::ChunkLayout chosen_layout(const plan::RunPlan& plan, const std::vector<LeafModule>& leaves) {
  const config::TrainConfig& config = plan.config;
  const plan::ChunkLayout layout = plan::plan_layout(
      leaves, plan::LayoutOptions{config.default_chunk_size, config.engine.chunk_size_search,
                                  plan::decided_cpu_embedding(config), plan.world_size});
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
    case plan::ChunkLayout::Choice::kMixed: {
      const int64_t ordinary = layout.num_chunks - layout.oversized_chunks;
      const std::string own =
          layout.split_modules > 0
              ? str_cat(" are each split over a group of their own (", plan.world_size,
                        " parts, one per rank: Note [split modules])")
              : std::string(" get a chunk of their own");
      const int64_t modules =
          layout.split_modules > 0 ? layout.split_modules : layout.oversized_chunks;
      log::info("chunk sizes: ", modules, " module(s) larger than default_chunk_size ",
                config.default_chunk_size, " (the largest ", layout.largest_leaf, " parameters)",
                own, ", and ", ordinary, " ordinary chunk(s) of ", layout.chunk_size,
                " elements (searched among ", layout.searched_lo, "..", layout.searched_hi,
                ") hold the rest; ", layout.padding_elements(), " elements of padding (",
                padding_percent(layout), ")");
      break;
    }
  }
  // The split last group is the layout's last N chunks.
  if (layout.tail_leaves > 0)
    log::info("chunk sizes: the last ", layout.tail_leaves,
              " module(s) share a group split over the ", plan.world_size, " ranks (parts of ",
              layout.size_of(layout.num_chunks - 1),
              " elements) instead of empty chunks completing it (Note [split modules])");
  return layout;
}

std::unique_ptr<ChunkedEngine::Impl> make_impl(const plan::RunPlan& plan,
                                               const plan::ChunkLayout& layout,
                                               dist::Communicator* comm,
                                               std::unique_ptr<tier::DeviceTier> device_tier) {
  const chunk::Sharding sharding = sharding_of(comm);
  PSTAR_INTERNAL_ASSERT(sharding.world_size == plan.world_size, "the plan is for ", plan.world_size,
                        " ranks, the communicator has ", sharding.world_size);
  const ChunkFormat format = chunk_format(plan, layout.chunk_size);
  // Every chunk's capacity, and ordinary ones for the empty chunks that complete the last group.
  std::vector<int64_t> sizes;
  for (int64_t k = 0; k < layout.num_chunks; ++k) sizes.push_back(layout.size_of(k));
  while (static_cast<int64_t>(sizes.size()) % sharding.world_size != 0)
    sizes.push_back(layout.chunk_size);
  EngineSettings settings;
  settings.accumulation = plan.accumulation;
  settings.warmup_iterations = plan.config.engine.warmup_iterations;
  settings.use_cpu_embedding = plan::decided_cpu_embedding(plan.config);
  settings.speculation = plan.speculation != plan::RunPlan::Speculation::kOff;
  settings.speculation_forced = plan.speculation == plan::RunPlan::Speculation::kAlways;
  settings.overlap_comm = plan.overlap_comm;
  settings.reduce_buffer_cap = plan.reduce_buffer_cap;
  PlacementSettings placement;
  placement.warmup_iterations = settings.warmup_iterations;
  placement.prefetch = plan.prefetch;
  placement.device_budget = plan.device_budget_per_rank;
  for (int64_t size : sizes) {
    placement.compute_bytes.push_back(size * format.payload.compute());
    placement.whole_bytes.push_back(size * format.payload.whole());
  }
  return std::make_unique<ChunkedEngine::Impl>(
      device_tier ? std::move(device_tier) : tier::make_emulated_tier(), format, sharding,
      std::move(sizes), layout.parts, comm, settings, placement, adam_settings(plan),
      plan.overlap_adam);
}

// The free bytes the fit may plan on NVMe with (Note [nvme fit]): what the disk has free, or, where
// its file system does not say, as much as asked (the store's preallocation is the check then).
int64_t nvme_capacity(const std::string& nvme_path) {
  if (nvme_path.empty()) return 0;
  const int64_t free = nvme::free_space(nvme_path);
  return free >= 0 ? free : std::numeric_limits<int64_t>::max() / 4;
}

// The NVMe store's options: the defaults, and two seams for tests and diagnosis through the
// environment. PSTAR_NVME_BACKEND=threads|io_uring forces a backend; PSTAR_NVME_FAULT=OP:N:WHAT
// (OP read or write, N the request counted from 0, WHAT ENOSPC, EIO or short) makes one request
// fail at the I/O layer (nvme::FaultInjection).
nvme::StoreOptions nvme_store_options() {
  nvme::StoreOptions o;
  if (const char* backend = std::getenv("PSTAR_NVME_BACKEND"); backend != nullptr) {
    const std::string b = backend;
    PSTAR_CHECK(b == "threads" || b == "io_uring" || b == "auto", ConfigError,
                "PSTAR_NVME_BACKEND: expected threads, io_uring or auto, found '", b, "'");
    o.backend = b == "threads"    ? nvme::BackendKind::kThreads
                : b == "io_uring" ? nvme::BackendKind::kIoUring
                                  : nvme::BackendKind::kAuto;
  }
  if (const char* fault = std::getenv("PSTAR_NVME_FAULT"); fault != nullptr && *fault != 0) {
    char op[8] = {0}, what[8] = {0};
    long long request = -1;
    const bool parsed = std::sscanf(fault, "%7[a-z]:%lld:%7[A-Za-z]", op, &request, what) == 3;
    const std::string o_text = op, w_text = what;
    PSTAR_CHECK(parsed && (o_text == "read" || o_text == "write") && request >= 0 &&
                    (w_text == "ENOSPC" || w_text == "EIO" || w_text == "short"),
                ConfigError, "PSTAR_NVME_FAULT: expected OP:N:WHAT (e.g. write:3:ENOSPC; OP read ",
                "or write, WHAT ENOSPC, EIO or short), found '", fault, "'");
    o.fault.op =
        o_text == "read" ? nvme::FaultInjection::Op::kRead : nvme::FaultInjection::Op::kWrite;
    o.fault.request = request;
    o.fault.error = w_text == "ENOSPC" ? ENOSPC : w_text == "EIO" ? EIO : 0;
    o.fault.short_bytes = 4096;
  }
  return o;
}

// Note [nvme tier]: the store of this rank's NVMe chunks, under a run directory of its own.
std::unique_ptr<NvmeOptimizer> open_nvme(const std::string& nvme_path, const plan::Fit& fit,
                                         const ChunkStore& store) {
  const std::string run_id = str_cat(core::random_id(), "-rank", store.sharding().rank);
  auto slots = nvme::NvmeStore::open(nvme_path, run_id, store.ordinary_optimizer_bytes(),
                                     fit.nvme_chunks, nvme_store_options());
  const int64_t buffers = std::min(fit.nvme_chunks, plan::kNvmeStagingChunks);
  auto tier = std::make_unique<NvmeOptimizer>(std::move(slots), store.chunk_size(),
                                              !store.format().fp32, buffers);
  PSTAR_INTERNAL_ASSERT(tier->payload_bytes() == store.ordinary_optimizer_bytes());
  return tier;
}

}  // namespace

ChunkedEngine::ChunkedEngine(const plan::RunPlan& plan, const std::vector<LeafModule>& leaves,
                             int64_t predicted_non_model, dist::Communicator* comm,
                             std::unique_ptr<tier::DeviceTier> device_tier) {
  PSTAR_INTERNAL_ASSERT(plan.chunked, "a chunk engine for a plan of engine.mode \"torch\"");
  const auto construction_begin = core::Clock::now();
  const plan::ChunkLayout layout = chosen_layout(plan, leaves);
  impl_ = make_impl(plan, layout, comm, std::move(device_tier));
  Impl& s = *impl_;
  ChunkStore& store = s.store;
  // Gathers and reductions go through Gloo over host memory (Note [ring collectives]); on a tier
  // whose device blocks the host cannot address, through host blocks (Note [staged collectives]).
  s.registering.expected_leaves = static_cast<int64_t>(leaves.size());
  // The store follows the plan's layout leaf by leaf (Note [chunk sizes]): one rule, in plan.
  s.registering.leaf_chunk = plan::leaf_chunks(leaves, layout, s.settings.use_cpu_embedding);
  s.registering.total_bytes = layout.params * store.format().payload.whole();
  const int64_t world = store.sharding().world_size;
  PSTAR_CHECK(layout.num_chunks >= world, ConfigError, "the model fits in ", layout.num_chunks,
              " chunk(s) of ", layout.chunk_size, " elements, fewer than the ", world,
              " ranks that would each own one; lower default_chunk_size (e.g. to ",
              std::max<int64_t>(1, layout.params / world), ") or use fewer ranks");

  // Tier budgets and the fit check (Note [fit]), before anything is allocated.
  store.set_budgets(plan.device_budget_per_rank, plan.host_budget_per_rank);
  plan::FitInput in;
  in.layout = layout;
  in.payload = store.format().payload;
  in.world_size = world;
  in.ranks_per_host = plan.ranks_per_host;
  in.device_budget = plan.device_budget_per_rank;
  in.host_budget = plan.budgets.host;
  in.non_model = predicted_non_model;
  // Note [flat gathers]: a device communicator reduces through a buffer of the device's.
  if (comm != nullptr && comm->on_device())
    in.device_reduce_buffer =
        plan::reduce_buffer_bytes(world, layout.largest_chunk(), plan.reduce_buffer_cap);
  const std::string& nvme_path = plan.config.engine.nvme_path;
  in.nvme_capacity = nvme_capacity(nvme_path);
  in.nvme_block = nvme::kDefaultAlignment;
  s.fit = plan::check_fit(in);
  if (!s.fit.fits) {
    PSTAR_THROW(OutOfMemoryError, s.fit.reason, " (engine.device_memory ",
                format_bytes(store.device_budget()), ", engine.host_memory ",
                format_bytes(store.host_budget()),
                nvme_path.empty() ? std::string()
                                  : str_cat(", engine.nvme_path ", nvme_path, " with ",
                                            format_bytes(in.nvme_capacity), " free"),
                "; `pstar estimate --config` shows the breakdown)");
  }
  if (s.fit.nvme_chunks > 0) {
    store.attach_nvme(open_nvme(nvme_path, s.fit, store));
    if (s.fit.nvme_device_chunks > 0) store.allocate_nvme_compute_buffers();
  } else if (!nvme_path.empty()) {
    log::info("engine.nvme_path ", nvme_path,
              ": the model fits host and device memory, so nothing goes to NVMe");
  }
  // Note [reserved blocks]: the owned chunks the fit puts on the host start there and move, so
  // their compute payloads come from the tier's copyable (pinned) pool. With use_cpu_embedding
  // some of them are host-only instead, which pinned blocks set aside would waste.
  if (!s.settings.use_cpu_embedding) {
    std::vector<int64_t> on_host;  // sizes; the empty chunks completing the last group too
    for (int64_t i = 0; i < s.fit.owned_chunks; ++i) {
      const int64_t k = i * world + store.sharding().rank;
      const plan::Fit::Home home = s.fit.owned.homes[static_cast<size_t>(i)];
      if (home == plan::Fit::Home::kHost || home == plan::Fit::Home::kHostNvme)
        on_host.push_back(k < layout.num_chunks ? layout.size_of(k) : layout.chunk_size);
    }
    store.reserve_host_compute(on_host);
  }
  const int64_t capacity = store.tier().device_capacity_bytes();
  const int64_t whole = store.format().payload.whole();  // per element
  PSTAR_CHECK(s.fit.device_static <= capacity, OutOfMemoryError, s.fit.device_chunks, " chunks",
              s.fit.nvme_device_chunks > 0
                  ? str_cat(" and the compute payloads of ", s.fit.nvme_device_chunks, " more")
                  : std::string(),
              " must start on the device tier (", format_bytes(s.fit.device_static),
              ") but it holds ", format_bytes(capacity),
              " of chunks; raise engine.device_memory or engine.host_memory");
  // This rank's chunks' elements: chunks differ in size (Note [chunk sizes]).
  int64_t owned = 0;
  for (int64_t i = 0; i < s.fit.owned_chunks; ++i) {
    const int64_t k = i * world + store.sharding().rank;
    owned += k < layout.num_chunks ? layout.size_of(k) : layout.chunk_size;
  }
  log::info(
      "chunk plan: ", layout.num_chunks, " chunks of ", layout.chunk_size, " elements, ",
      store.format().payload.whole(), " bytes per parameter (",
      store.format().reuse ? "param/grad reuse" : "separate fp32 gradients", "), model data ",
      format_bytes(layout.total_elements() * whole),
      world > 1 ? str_cat(", ", s.fit.owned_chunks, " chunks (", format_bytes(owned * whole),
                          " on this rank) owned by each of ", world, " ranks")
                : std::string(),
      "; ", s.fit.host_chunks, " chunks on the host tier (", format_bytes(store.host_budget()),
      // A node's ranks share its host memory (Note [fit]): say what the node holds in all.
      plan.ranks_per_host > 1 ? str_cat(" per rank, ", format_bytes(plan.budgets.host), " for the ",
                                        plan.ranks_per_host, " ranks of this node")
                              : std::string(),
      "), ", s.fit.device_chunks, " on the device tier (", format_bytes(store.device_budget()),
      // Ranks sharing a GPU share its budget too (RunPlan::device_budget_per_rank).
      plan.rank.gpu_ranks > 1
          ? str_cat(" per rank, ", format_bytes(plan.budgets.device), " for the ",
                    plan.rank.gpu_ranks, " ranks on ", plan.rank.name())
          : std::string(),
      ", ", store.tier().describe(), ")",
      s.fit.nvme_chunks > 0
          ? str_cat(", ", s.fit.nvme_chunks, " with their optimizer payloads on NVMe (",
                    format_bytes(s.fit.nvme_chunks * store.ordinary_optimizer_bytes()), " in ",
                    nvme_path, ", compute payloads of ", s.fit.nvme_host_chunks,
                    " on the host and ", s.fit.nvme_device_chunks,
                    " on the device, a staging pool of ", format_bytes(store.nvme()->pool_bytes()),
                    ")")
          : std::string(),
      "; predicted non-model peak ", format_bytes(predicted_non_model));
  // Note [set-up phases]: what the constructor did besides allocating is the plan's.
  s.registering.construction_alloc_s = store.setup_phases().total_seconds();
  s.registering.construction_plan_s =
      std::max(0.0, core::seconds_since(construction_begin) - s.registering.construction_alloc_s);
}

ChunkedEngine::~ChunkedEngine() = default;

int64_t ChunkedEngine::device_arena_bytes(const plan::RunPlan& plan, int64_t predicted_non_model) {
  return plan::device_arena_bytes(plan.device_budget_per_rank, predicted_non_model);
}

tier::DeviceTier& ChunkedEngine::device_tier() { return impl_->store.tier(); }
model::ModuleHooks* ChunkedEngine::hooks() { return impl_.get(); }

void ChunkedEngine::begin_eval() {
  if (!eval_) eval_ = std::make_unique<EvalHooks>(*impl_);
  eval_->begin();
}

model::ModuleHooks* ChunkedEngine::eval_hooks() {
  PSTAR_INTERNAL_ASSERT(eval_ && eval_->active(), "eval_hooks() outside begin_eval/end_eval");
  return eval_.get();
}

void ChunkedEngine::end_eval() { eval_->end(); }
const chunk::AccessTrace& ChunkedEngine::trace() const { return impl_->placement.trace(); }
int64_t ChunkedEngine::compute_chunk_bytes() const {
  return impl_->store.chunk_size() * impl_->store.format().payload.compute();
}
int64_t ChunkedEngine::optimizer_chunk_bytes() const {
  return impl_->store.ordinary_optimizer_bytes();
}
int64_t ChunkedEngine::device_budget_bytes() const { return impl_->store.device_budget(); }
const plan::Fit& ChunkedEngine::fit() const { return impl_->fit; }
int64_t ChunkedEngine::margin_chunks() const {
  int64_t n = 0;
  for (const Chunk& c : impl_->store.chunks()) n += c.margin() ? 1 : 0;
  return n;
}
int64_t ChunkedEngine::chunk_size() const { return impl_->store.chunk_size(); }
int64_t ChunkedEngine::num_chunks() const { return impl_->store.num_chunks(); }
int64_t ChunkedEngine::largest_working_set_bytes() const {
  return impl_->placement.largest_working_set_bytes();
}
std::vector<int64_t> ChunkedEngine::chunk_sizes() const {
  std::vector<int64_t> sizes;
  for (const Chunk& c : impl_->store.chunks()) sizes.push_back(c.size);
  return sizes;
}
int64_t ChunkedEngine::startup_peak_bytes() const { return impl_->startup_peak; }

bool ChunkedEngine::set_observer(EngineObserver* observer) {
  Impl& s = *impl_;
  s.store.set_observer(observer);
  if (observer == nullptr) return true;
  const ChunkStore& store = s.store;
  const chunk::Sharding& sharding = store.sharding();
  EngineShape shape;
  shape.chunk_size = store.chunk_size();
  shape.num_chunks = store.num_chunks();
  // An ordinary chunk's; the table gives each chunk's capacity.
  shape.compute_bytes_per_chunk = store.chunk_size() * store.format().payload.compute();
  shape.optimizer_bytes_per_chunk = store.ordinary_optimizer_bytes();
  shape.device_budget = store.device_budget();
  shape.host_budget = store.host_budget();
  shape.world_size = sharding.world_size;
  shape.rank = sharding.rank;
  shape.warmup_iterations = s.settings.warmup_iterations;
  formats::ProfileChunks& table = shape.chunks;
  const ChunkFormat& f = store.format();
  for (int64_t k = 0; k < store.num_chunks(); ++k) {
    const Chunk& c = store.chunks()[static_cast<size_t>(k)];
    table.id.push_back(k);
    table.numel.push_back(c.used);
    table.capacity.push_back(c.size);
    table.group.push_back(sharding.group_of(k));
    table.owner.push_back(sharding.owner_of(k));
    table.embedding.push_back(c.host_only() ? 1 : 0);
    table.payloads.push_back(str_cat("param", f.reuse ? "+grad" : ",grad", f.fp32 ? "" : ",master",
                                     ",exp_avg,exp_avg_sq"));
    std::string names;
    for (const int64_t t : c.tensors)
      names += (names.empty() ? "" : ",") + store.tensors()[static_cast<size_t>(t)].name;
    table.tensors.push_back(std::move(names));
  }
  observer->attach(shape);
  return true;
}

// ---- the step ----------------------------------------------------------------------------------

int64_t ChunkedEngine::num_parameters() const {
  int64_t n = 0;
  for (const auto& t : impl_->store.tensors()) n += t.numel;
  return n;
}

std::string ChunkedEngine::describe() const {
  const ChunkStore& store = impl_->store;
  return str_cat("chunked (", store.num_chunks(), " chunks of ", store.chunk_size(),
                 " elements, device ", format_bytes(store.device_budget()), " ",
                 store.tier().describe(), ", host ", format_bytes(store.host_budget()), ")");
}

void ChunkedEngine::begin_step() {
  Impl& s = *impl_;
  // What ran between steps (model set-up before the first, a checkpoint's copies) is not this
  // step's non-model memory: the first moment's window starts here.
  s.store.tier().reset_non_model_peak();
  s.store.unstage_optimizer();  // a parameter load or a checkpoint staged it
  s.step = StepMemory{};
  s.store.traffic() = Traffic{};
  s.store.reset_host_peak();
  s.adam.begin_step();
  s.sync.begin_step();
  s.step.tier_syncs_before = s.store.tier().own_synchronizations();
  const tier::DeviceTier::HostMemory pools = s.store.tier().host_memory();
  s.step.pool_allocated_before = pools.pinned.allocated + pools.pageable.allocated;
  s.placement.begin_iteration();
  s.micro_batches_done = 0;
  s.grads.reset_arrivals();
}

void ChunkedEngine::expect_update(double lr, double grad_multiplier) {
  impl_->adam.expect(lr, grad_multiplier);
}

// Note [speculative adam]: from the second planned step, once one has shown what the tier's pools
// need beside the slots. Reduced gradients are sums over the ranks, and this rank's sum of squares
// is part of the step's, so it bounds the norm from below: past (max_norm x loss scale x ranks)^2
// the step clips (the trainer's test, norm > max_norm, with room for the sums' rounding).
void ChunkedEngine::speculate_update(double lr, double grad_multiplier, double max_norm) {
  Impl& s = *impl_;
  if (!s.settings.speculation || !s.adam.overlapping() || s.pools.planned_steps == 0) return;
  if (!s.pools.slots_made) s.provide_speculation_slots();
  const double ranks = static_cast<double>(s.store.sharding().world_size);
  const double bound = max_norm * ranks / grad_multiplier;
  s.adam.speculate(
      lr, grad_multiplier,
      max_norm > 0 ? bound * bound * (1 + 1e-9) : std::numeric_limits<double>::infinity());
}

void ChunkedEngine::skip_update(const std::vector<std::string>& names) {
  Impl& s = *impl_;
  std::vector<int64_t> held;
  held.reserve(names.size());
  for (const std::string& name : names) held.push_back(s.store.tensor_id(name));
  s.adam.tensor_steps().hold(held);
}

void ChunkedEngine::end_micro_batch() {
  Impl& s = *impl_;
  s.adam.await_queued();  // a model whose backward ran no module hook has not waited yet
  ++s.micro_batches_done;
  s.grads.reset_arrivals();
  s.grads.settle_micro_batch(/*host_touched=*/s.sync.active());
  s.in_backward = false;
  s.sync.end_micro_batch();
}

double ChunkedEngine::grad_norm(double loss_scale) {
  Impl& s = *impl_;
  s.optimizer_moment();
  const double sum = s.sync.all_reduce_sum(s.grads.sq_sum());
  // Note [host adam bytes]: every host chunk's gradient was read once for it.
  for (const Chunk& c : s.store.chunks())
    if (!c.remote && c.compute_place == Place::kHost)
      s.step.norm_host_bytes += c.used * (s.store.grad_type() == optim::GradType::kF32 ? 4 : 2);
  // Reduced gradients are sums over the ranks; the step's gradient is their mean.
  return std::sqrt(sum) / (loss_scale * static_cast<double>(s.store.sharding().world_size));
}

void ChunkedEngine::update(double lr, double grad_multiplier) {
  Impl& s = *impl_;
  s.adam.update(lr, grad_multiplier, s.placement.planned());
}

void ChunkedEngine::end_step() {
  Impl& s = *impl_;
  s.adam.record_finished();
  // Note [speculative adam]: a step without an update drops what was speculated before the
  // parameters are restored from the masters.
  if (!s.adam.updated()) s.adam.discard_speculation();
  s.grads.end_step(s.adam.updated());
  s.adam.end_step();
  for (auto& t : s.store.tensors()) s.store.set_state(t, TensorState::kHold);
  // Note [speculative adam]: the most the pools held in a planned step, before any trim.
  if (s.placement.planned()) {
    ++s.pools.planned_steps;
    s.pools.high = std::max(s.pools.high, s.store.tier().host_memory().current());
  }
  if (s.placement.end_iteration()) s.plan_margin();
  s.store.check_host_pools();
  s.finish_step_memory();
}

void ChunkedEngine::state_dict(TensorList& out) {
  Impl& s = *impl_;
  s.adam.await_all();
  s.store.synchronize();
  // Copies on the host, whichever side a payload is on.
  const auto host_copy = [](const torch::Tensor& view) {
    return view.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  };
  const ChunkStore& store = s.store;
  const ChunkFormat& f = store.format();
  // Each rank writes the chunks it owns (Note [chunk layout]); a split module's tensors, the piece
  // in its part (Note [checkpoint pieces]).
  for (const auto& t : store.tensors()) {
    const OwnedPiece piece = store.owned_piece(t);
    if (piece.numel() == 0) continue;
    s.store.stage_optimizer(piece.chunk, /*write=*/false);  // Note [nvme tier]: read through
    const Chunk& c = store.chunks()[static_cast<size_t>(piece.chunk)];
    const std::string name = t.split ? ckpt::piece_name(t.name, piece.begin) : t.name;
    const std::vector<int64_t> shape = t.split ? std::vector<int64_t>{piece.numel()} : t.shape;
    out.emplace_back(name, host_copy(store.view(f.fp32 ? c.param : c.master, torch::kFloat32,
                                                piece.offset, shape)));
    out.emplace_back(ckpt::exp_avg_of(name),
                     host_copy(store.view(c.exp_avg, torch::kFloat32, piece.offset, shape)));
    out.emplace_back(ckpt::exp_avg_sq_of(name),
                     host_copy(store.view(c.exp_avg_sq, torch::kFloat32, piece.offset, shape)));
    if (t.split) out.emplace_back(ckpt::shape_name(t.name), torch::tensor(t.shape, torch::kInt64));
  }
  s.store.unstage_optimizer();
  out.emplace_back(ckpt::kAdamStep, torch::tensor(s.adam.steps(), torch::kInt64));
  // Note [held parameters]: every rank knows every tensor's count, and writes them all.
  const auto& tensors = store.tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (const int64_t missed = s.adam.tensor_steps().missed(static_cast<int64_t>(i)); missed > 0)
      out.emplace_back(ckpt::adam_missed_of(tensors[i].name), torch::tensor(missed, torch::kInt64));
}

void ChunkedEngine::load_state_dict(const TensorMap& in, const std::string& file) {
  Impl& s = *impl_;
  s.adam.await_all();
  s.store.synchronize();
  torch::NoGradGuard no_grad;
  const int64_t steps =
      checkpoint_tensor(in, ckpt::kAdamStep, file, {}, torch::kInt64).item<int64_t>();
  s.adam.set_steps(steps);
  ChunkStore& store = s.store;
  const ChunkFormat& f = store.format();
  for (size_t i = 0; i < store.tensors().size(); ++i)
    s.adam.tensor_steps().set_missed(static_cast<int64_t>(i),
                                     ckpt::adam_missed(in, store.tensors()[i].name, steps, file));
  for (const auto& t : store.tensors()) {
    const OwnedPiece piece = store.owned_piece(t);
    if (piece.numel() == 0) continue;
    store.stage_optimizer(piece.chunk, /*write=*/true);  // Note [nvme tier]: written through
    const Chunk& c = store.chunks()[static_cast<size_t>(piece.chunk)];
    // Note [checkpoint pieces]: this rank's piece of a split module's tensor.
    const std::string name = t.split ? ckpt::piece_name(t.name, piece.begin) : t.name;
    const std::vector<int64_t> shape = t.split ? std::vector<int64_t>{piece.numel()} : t.shape;
    const at::Tensor master =
        store.view(f.fp32 ? c.param : c.master, torch::kFloat32, piece.offset, shape);
    master.copy_(checkpoint_tensor(in, name, file, shape, torch::kFloat32));
    if (!f.fp32) store.view(c.param, f.dtype, piece.offset, shape).copy_(master);
    store.view(c.exp_avg, torch::kFloat32, piece.offset, shape)
        .copy_(checkpoint_tensor(in, ckpt::exp_avg_of(name), file, shape, torch::kFloat32));
    store.view(c.exp_avg_sq, torch::kFloat32, piece.offset, shape)
        .copy_(checkpoint_tensor(in, ckpt::exp_avg_sq_of(name), file, shape, torch::kFloat32));
  }
  store.unstage_optimizer();
}

void ChunkedEngine::fill_metrics(EngineMetrics& m) {
  Impl& s = *impl_;
  m = s.last;
  const tier::DeviceTier::HostMemory held = s.store.tier().host_memory();
  m.pinned = HeldBytes{held.pinned.current, held.pinned.peak};
  m.pageable = HeldBytes{held.pageable.current, held.pageable.peak};
  if (s.sync.active()) {
    const SyncFigures comm = s.sync.take_figures();
    m.comm_bytes = comm.bytes_sent;
    m.comm_s = comm.seconds;
    m.comm_staged_bytes = comm.staged_bytes;
    m.comm_wait_s = comm.wait_seconds;
    m.comm_gathers_ahead = comm.gathers_ahead;
  }
}

}  // namespace pstar::engine
