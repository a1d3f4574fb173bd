// The chunk engine's registration: each leaf module of a unit taken into chunks as the model is
// built, its values written there (copied from the module, or the counter-based init, Note
// [counter-based init] in pstar/model/init.h), and the checks once the last unit has come.
#include <algorithm>

#include "chunked_engine_impl.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/engine/chunked_engine.h"

namespace pstar::engine {

core::SetupPhases ChunkedEngine::setup_phases() const {
  const Impl& s = *impl_;
  core::SetupPhases phases = s.store.setup_phases();
  phases.merge(s.registering.values);
  // Registration's own time less the parts timed inside it; the constructor's allocation was
  // before it.
  const double inside = phases.total_seconds() - s.registering.construction_alloc_s;
  phases.add(core::SetupPhase::kChunks, std::max(0.0, s.registering.seconds - inside));
  phases.add(core::SetupPhase::kPlan, s.registering.construction_plan_s);
  return phases;
}

// ---- registration ------------------------------------------------------------------------------

void ChunkedEngine::Impl::sample_startup() {
  startup_peak = std::max(startup_peak, store.host_bytes().current + store.device_bytes().current +
                                            host_counter.current_bytes());
}

void ChunkedEngine::Impl::append_chunk(Residence residence) {
  const int64_t k = store.num_chunks();
  const chunk::Sharding& sharding = store.sharding();
  if (!sharding.owns(k)) {
    store.new_chunk(residence, Place::kHost);  // another rank's: no payloads here
    return;
  }
  // The i-th chunk this rank owns is chunk i * N + rank; the fit chose its home (Note [fit],
  // Note [nvme tier]).
  using Home = plan::Fit::Home;
  const Home home = fit.owned.homes[static_cast<size_t>(k / sharding.world_size)];
  const bool on_nvme = home == Home::kHostNvme || home == Home::kDeviceNvme;
  PSTAR_INTERNAL_ASSERT(residence != Residence::kHostOnly || home == Home::kHost,
                        "an embedding chunk was planned onto the device or NVMe");
  if (home == Home::kDevice || home == Home::kDeviceNvme)
    store.new_chunk(Residence::kMargin, Place::kDevice, on_nvme);  // on the device for good
  else
    store.new_chunk(residence, Place::kHost, on_nvme);
}

void ChunkedEngine::Impl::register_leaf(torch::nn::Module& module, const std::string& prefix,
                                        bool host_only, const UnitValues& values) {
  PSTAR_INTERNAL_ASSERT(registering.registered_leaves < registering.expected_leaves, "module ",
                        prefix, " is one more than the ", registering.expected_leaves, " planned");
  store.add_module(
      module, prefix, host_only ? Residence::kHostOnly : Residence::kMovable,
      registering.leaf_chunk[static_cast<size_t>(registering.registered_leaves)],
      [this](Residence residence) { append_chunk(residence); }, [this](int64_t id) { on_grad(id); },
      values.from == UnitValues::From::kModule);
  // Written now, while the leaf's chunk is the last one: an NVMe chunk's optimizer payloads are
  // staged until the next NVMe chunk is made (Note [nvme tier]).
  if (values.from == UnitValues::From::kInit)
    write_initial_values(store.tensors_of(module), values);
  ++registering.registered_leaves;
}

void ChunkedEngine::Impl::write_initial_values(const std::vector<int64_t>& ids,
                                               const UnitValues& values) {
  core::PhaseTimer timer(&registering.values, core::SetupPhase::kInit);
  const ChunkFormat& f = store.format();
  const optim::ParamOutType low_type = f.fp32                        ? optim::ParamOutType::kNone
                                       : f.dtype == torch::kBFloat16 ? optim::ParamOutType::kBF16
                                                                     : optim::ParamOutType::kF16;
  std::vector<model::InitWrite> writes;
  // Payloads the host cannot write (a CUDA tier's device side): values made on the host, then
  // copied there.
  struct Staged {
    at::Tensor values;
    OwnedPiece piece;
  };
  std::vector<Staged> staged;
  int64_t bytes = 0;
  torch::NoGradGuard no_grad;
  for (const int64_t id : ids) {
    const ManagedTensor& t = store.tensors()[static_cast<size_t>(id)];
    // The elements of the tensor this rank keeps: all of it in a chunk this rank owns, or its
    // piece in this rank's part of a split module (Note [split modules]).
    const OwnedPiece piece = store.owned_piece(t);
    if (piece.numel() == 0) continue;  // its owner writes it
    const Chunk& c = store.chunk(piece.chunk);
    model::InitWrite w;
    w.init = values.init(t.name);
    w.stream = model::init_stream(t.name);
    w.begin = piece.begin;
    w.end = piece.end;
    const at::Tensor master =
        store.view(f.fp32 ? c.param : c.master, torch::kFloat32, piece.offset, {piece.numel()});
    const at::Tensor param =
        f.fp32 ? master : store.view(c.param, f.dtype, piece.offset, {piece.numel()});
    if (master.is_cpu() && param.is_cpu()) {
      w.f32 = master.data_ptr<float>();
      if (!f.fp32) {
        w.low = param.data_ptr();
        w.low_type = low_type;
      }
    } else {
      staged.push_back(Staged{torch::empty({piece.numel()}, torch::kFloat32), piece});
      w.f32 = staged.back().values.data_ptr<float>();
    }
    bytes += piece.numel() * (4 + (f.fp32 ? 0 : f.elem_bytes));
    writes.push_back(w);
  }
  model::write_init(values.seed, writes);
  for (const Staged& s : staged) {
    const Chunk& c = store.chunk(s.piece.chunk);
    const std::vector<int64_t> shape = {s.piece.numel()};
    store.view(f.fp32 ? c.param : c.master, torch::kFloat32, s.piece.offset, shape).copy_(s.values);
    // The same rounding as f32_to_bf16/f32_to_f16 (to nearest even).
    if (!f.fp32) store.view(c.param, f.dtype, s.piece.offset, shape).copy_(s.values);
  }
  timer.set_bytes(bytes);
}

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
    fn(leaf, item.key(), LeafModule{numel, model::is_embedding_leaf(leaf)});
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

void ChunkedEngine::register_unit(torch::nn::Module& unit, const std::string& prefix,
                                  const UnitValues& values) {
  PSTAR_INTERNAL_ASSERT(values.from != UnitValues::From::kInit || values.init,
                        "register_unit with the counter-based init but no parameter_init");
  Impl& s = *impl_;
  const auto begin = core::Clock::now();
  if (!s.registering.progress)
    s.registering.progress = std::make_unique<core::SetupProgress>("building the model into chunks",
                                                                   s.registering.total_bytes);
  s.sample_startup();
  const int64_t per_parameter = s.store.format().payload.whole();
  for_each_leaf(unit,
                [&](torch::nn::Module& leaf, const std::string& name, const LeafModule& spec) {
                  s.register_leaf(leaf, name.empty() ? prefix : prefix + name + ".",
                                  spec.embedding && s.settings.use_cpu_embedding, values);
                  s.sample_startup();
                  s.registering.progress->advance(spec.numel * per_parameter);
                });
  s.registering.seconds += core::seconds_since(begin);
}

void ChunkedEngine::load_parameter(const std::string& name, const at::Tensor& value) {
  Impl& s = *impl_;
  const ManagedTensor& t = s.store.tensor(name);
  const OwnedPiece piece = s.store.owned_piece(t);
  if (piece.numel() == 0) return;  // its owner loads it
  s.adam.await_chunk(piece.chunk);
  s.store.stage_optimizer(piece.chunk, /*write=*/true);
  torch::NoGradGuard no_grad;
  const at::Tensor values = value.reshape({-1}).slice(0, piece.begin, piece.end);
  const Chunk& c = s.store.chunk(piece.chunk);
  const ChunkFormat& f = s.store.format();
  s.store.view(f.fp32 ? c.param : c.master, torch::kFloat32, piece.offset, {piece.numel()})
      .copy_(values);
  if (!f.fp32) s.store.view(c.param, f.dtype, piece.offset, {piece.numel()}).copy_(values);
}

void ChunkedEngine::finish_registration() {
  Impl& s = *impl_;
  const auto begin = core::Clock::now();
  ChunkStore& store = s.store;
  PSTAR_INTERNAL_ASSERT(s.registering.registered_leaves == s.registering.expected_leaves,
                        "registered ", s.registering.registered_leaves, " modules, planned ",
                        s.registering.expected_leaves);
  // Every group has one chunk per rank: empty chunks pad the last one.
  while (store.num_chunks() % store.sharding().world_size != 0) s.append_chunk(Residence::kMovable);
  for (int64_t k = 0; k < store.num_chunks(); ++k) store.zero_padding(k);
  store.unstage_optimizer();  // the last chunk made goes to its NVMe slot
  int64_t on_nvme = 0;
  for (const Chunk& c : store.chunks()) on_nvme += c.nvme ? 1 : 0;
  PSTAR_INTERNAL_ASSERT(on_nvme == s.fit.nvme_chunks, "made ", on_nvme, " chunks on NVMe, planned ",
                        s.fit.nvme_chunks);
  s.sync.build_groups();
  // Remote chunks start released: their tensors hold nothing until gathered.
  for (int64_t k = 0; k < store.num_chunks(); ++k)
    if (store.chunk(k).remote) store.repoint(k);
  s.registering.seconds += core::seconds_since(begin);
  s.registering.progress.reset();
  int64_t used = 0;
  for (const Chunk& c : store.chunks()) used += c.used;
  const ChunkFormat& f = store.format();
  const int64_t n = store.num_chunks();
  int64_t capacity = 0;
  for (const Chunk& c : store.chunks()) capacity += c.size;
  const int64_t per_element = f.payload.whole();
  log::info("chunks: ", n, " x {param ", f.fp32 ? "fp32" : c10::toString(f.dtype),
            f.reuse ? "+grad" : "", f.reuse ? "" : ", grad fp32", f.fp32 ? "" : ", master fp32",
            ", momentum fp32, variance fp32} = ", n * (f.reuse ? 4 : 5) - (f.fp32 ? n : 0),
            " payloads holding ", used, " parameters; ", capacity - used, " elements (",
            format_bytes((capacity - used) * per_element), ") of padding");
  log::info("start-up peak: ", format_bytes(s.startup_peak), " of host memory for ",
            format_bytes(capacity * per_element),
            " of model data (units taken into chunks as they are built)");
}

}  // namespace pstar::engine
