#include "chunk_store.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "grad_accumulator.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/clock.h"

namespace pstar::engine {

using core::seconds_since;

ChunkStore::ChunkStore(std::unique_ptr<tier::DeviceTier> tier, const ChunkFormat& format,
                       chunk::Sharding sharding, std::vector<int64_t> sizes,
                       std::vector<int64_t> parts)
    : tier_(std::move(tier)),
      format_(format),
      sharding_(sharding),
      planned_{std::move(sizes), std::move(parts)} {
  PSTAR_INTERNAL_ASSERT(format_.payload.compute() == format_.elem_bytes + (format_.reuse ? 0 : 4));
}

const std::vector<int64_t>& ChunkStore::tensors_of(torch::nn::Module& module) const {
  auto it = module_tensors_.find(&module);
  PSTAR_CHECK(it != module_tensors_.end(), ConfigError, "a module (", module.name(),
              ") ran through run_module but its parameters are not managed by the chunk "
              "engine; build the model before training starts");
  return it->second;
}

const ManagedTensor& ChunkStore::tensor(const std::string& name) const {
  return tensors_[static_cast<size_t>(tensor_id(name))];
}

int64_t ChunkStore::tensor_id(const std::string& name) const {
  auto it = tensor_by_name_.find(name);
  PSTAR_INTERNAL_ASSERT(it != tensor_by_name_.end(), "unknown parameter ", name);
  return it->second;
}

// ---- bytes per place ---------------------------------------------------------------------------

void ChunkStore::add_bytes(Place place, int64_t bytes) {
  memory::Stat& stat = place == Place::kDevice ? bytes_.device : bytes_.host;
  if (bytes >= 0)
    stat.increase(bytes);
  else
    stat.decrease(-bytes);
  if (listeners_.observer != nullptr)
    listeners_.observer->set_chunk_bytes(bytes_.device.current, bytes_.host.current);
}

int64_t ChunkStore::gathered_device_bytes() const {
  int64_t bytes = bytes_.collective_device;
  for (const Chunk& c : chunks_)
    bytes += c.remote && c.param && c.compute_place == Place::kDevice
                 ? c.size * format_.payload.compute()
                 : 0;
  // Note [split modules]: an open span holds this rank's part a second time.
  for (const auto& [g, span] : spans_)
    if (span.open() && span.param.side() == Place::kDevice)
      bytes += compute_bytes(sharding_.first_of_group(g) + sharding_.rank);
  return bytes;
}

int64_t ChunkStore::margin_bytes() const {
  int64_t bytes = 0;
  for (const Chunk& c : chunks_)
    bytes += c.margin()
                 ? c.size * (format_.payload.compute() + (c.nvme ? 0 : format_.payload.optimizer()))
                 : 0;
  return bytes;
}

void ChunkStore::set_budgets(int64_t device, int64_t host) {
  budgets_.device = device;
  budgets_.host = host;
}

void ChunkStore::check_host() {
  PSTAR_CHECK(bytes_.host.current <= budgets_.host, OutOfMemoryError, "host tier: chunks need ",
              format_bytes(bytes_.host.current), " but engine.host_memory is ",
              format_bytes(budgets_.host),
              "; raise engine.host_memory or engine.device_memory, or train a smaller model");
  check_host_pools();
}

// Note [exact-size host pool]: what the tier's host pools hold, free blocks included, counts
// against engine.host_memory; the free blocks go back before that is called a failure.
void ChunkStore::check_host_pools() {
  if (tier_->host_memory().current() <= budgets_.host) return;
  tier_->trim();
  ++traffic_.trims;
  const tier::DeviceTier::HostMemory held = tier_->host_memory();
  PSTAR_CHECK(held.current() <= budgets_.host, OutOfMemoryError, "host tier: the chunk payloads' ",
              "memory pools hold ", format_bytes(held.current()), " (",
              format_bytes(held.pinned.current), " of it page-locked) but engine.host_memory is ",
              format_bytes(budgets_.host),
              "; raise engine.host_memory or engine.device_memory, or train a smaller model");
}

// ---- observer and traffic ----------------------------------------------------------------------

void ChunkStore::set_observer(EngineObserver* observer) {
  listeners_.observer = observer;
  if (listeners_.observer != nullptr)
    listeners_.observer->set_chunk_bytes(bytes_.device.current, bytes_.host.current);
}

void ChunkStore::record(int64_t chunk, formats::ChunkEventKind kind, int64_t bytes,
                        double seconds) {
  if (listeners_.observer != nullptr) listeners_.observer->event(chunk, kind, bytes, seconds);
}

std::vector<int8_t> ChunkStore::places() const {
  std::vector<int8_t> places(chunks_.size());
  for (size_t k = 0; k < chunks_.size(); ++k) {
    const Chunk& c = chunks_[k];
    const auto place = !c.param                            ? formats::ChunkPlace::kAbsent
                       : c.compute_place == Place::kDevice ? formats::ChunkPlace::kDevice
                       : c.nvme                            ? formats::ChunkPlace::kNvme
                                                           : formats::ChunkPlace::kHost;
    places[k] = static_cast<int8_t>(place);
  }
  return places;
}

void ChunkStore::synchronize() {
  tier_->synchronize();
  ++traffic_.syncs;
}

// ---- chunks and tensors ------------------------------------------------------------------------

void ChunkStore::new_chunk(Residence residence, Place place, bool on_nvme) {
  Chunk c;
  const int64_t k = num_chunks();
  c.size = k < static_cast<int64_t>(planned_.sizes.size()) ? planned_.sizes[static_cast<size_t>(k)]
                                                           : format_.chunk_size;
  c.part =
      k < static_cast<int64_t>(planned_.parts.size()) ? planned_.parts[static_cast<size_t>(k)] : -1;
  c.residence = residence;
  if (!sharding_.owns(k)) {
    // Another rank's: its payloads exist here only while gathered (Note [gathering]).
    PSTAR_INTERNAL_ASSERT(residence != Residence::kMargin, "another rank's chunk in the margin");
    c.remote = true;
    c.compute_place = c.optimizer_place = c.host_only() ? Place::kHost : Place::kDevice;
    chunks_.push_back(std::move(c));
    return;
  }
  PSTAR_INTERNAL_ASSERT(!c.host_only() || place == Place::kHost,
                        "an embedding chunk was planned onto the device");
  PSTAR_INTERNAL_ASSERT(!on_nvme || (nvme_ != nullptr && !c.host_only()), "chunk ", k,
                        " was planned onto NVMe without the tier");
  PSTAR_INTERNAL_ASSERT(!on_nvme || (c.size == format_.chunk_size && !c.split()), "chunk ", k,
                        " of ", c.size,
                        " elements was planned onto NVMe, whose slots are ordinary chunks");
  c.compute_place = c.optimizer_place = place;
  core::PhaseTimer timer(&setup_, core::SetupPhase::kAlloc);
  const int64_t size = c.size;
  const int64_t bytes = size * (on_nvme ? format_.payload.compute() : format_.payload.whole());
  timer.set_bytes(bytes);
  // Note [pinned what moves]: compute payloads move unless the chunk always computes on the
  // host; optimizer state moves at most once, if the plan promotes the chunk to the margin.
  const bool compute_moves = !c.host_only();
  // Note [parallel first touch]: the parameters and master weights are written whole before they
  // are read (their values as the leaves come, their padding by zero_padding), so they are not
  // zeroed first; the gradient and the moments start at zero.
  c.param = allocate_payload(place, size * format_.elem_bytes, compute_moves, /*zeroed=*/false);
  if (!format_.reuse) c.grad = allocate_payload(place, size * 4, compute_moves);
  c.nvme = on_nvme;
  if (on_nvme) {
    c.optimizer_place = Place::kHost;  // host Adam, through the staging pool (Note [nvme tier])
  } else {
    if (!format_.fp32) c.master = allocate_payload(place, size * 4, false, /*zeroed=*/false);
    c.exp_avg = allocate_payload(place, size * 4, false);
    c.exp_avg_sq = allocate_payload(place, size * 4, false);
  }
  chunks_.push_back(std::move(c));
  timer.stop();
  add_bytes(place, bytes);
  check_host();
  if (on_nvme) {
    // Filled by add_module now, written to its slot when the next NVMe chunk is made or
    // registration ends.
    unstage_optimizer();
    nvme_->add_chunk(k);
    stage(k, NvmeOptimizer::Use::kFresh);
    staged_.dirty = true;
  }
}

int64_t ChunkStore::take_parameter(torch::nn::Module& module, ManagedTensor t,
                                   const std::function<void(int64_t)>& on_grad) {
  PSTAR_CHECK(t.param.is_floating_point(), ConfigError, "parameter ", t.name, " has dtype ",
              t.param.scalar_type(), "; parameters must be floating point");
  PSTAR_CHECK(t.param.requires_grad(), ConfigError, "parameter ", t.name,
              " does not require grad; register frozen tensors as buffers instead");
  PSTAR_CHECK(tensor_by_name_.count(t.name) == 0, ConfigError, "parameter ", t.name,
              " is registered twice (tied weights must be one parameter used twice)");
  const int64_t id = static_cast<int64_t>(tensors_.size());
  t.param.register_hook([on_grad, id](const torch::Tensor&) { on_grad(id); });
  tensor_by_name_[t.name] = id;
  module_tensors_[&module].push_back(id);
  tensors_.push_back(std::move(t));
  return id;
}

void ChunkStore::add_module(torch::nn::Module& module, const std::string& prefix,
                            Residence residence, int64_t k,
                            const std::function<void(Residence)>& new_chunk_for,
                            const std::function<void(int64_t)>& on_grad, bool copy_values) {
  if (k < static_cast<int64_t>(planned_.parts.size()) &&
      planned_.parts[static_cast<size_t>(k)] >= 0) {
    add_split_module(module, prefix, residence, k, new_chunk_for, on_grad, copy_values);
    return;
  }
  const bool host_only = residence == Residence::kHostOnly;
  auto params = module.named_parameters(/*recurse=*/false);
  int64_t numel = 0;
  for (const auto& p : params) numel += p.value().numel();
  // Leaves come in the plan's order: each in the last chunk or the next one, but for the split
  // modules' groups, which the plan puts first (Note [split modules]): their chunks are made here
  // as a leaf after them passes, their values written when their module comes.
  while (num_chunks() < k) new_chunk_for(Residence::kMovable);
  if (k == num_chunks()) new_chunk_for(residence);
  PSTAR_INTERNAL_ASSERT(k == num_chunks() - 1, "module ", prefix, " was planned into chunk ", k,
                        " while chunk ", num_chunks() - 1, " is being filled");
  Chunk& c = chunks_.back();
  PSTAR_INTERNAL_ASSERT(c.used + numel <= c.size && c.host_only() == host_only, "module ", prefix,
                        " (", numel, " parameters) does not fit chunk ", k, " as planned: ", c.used,
                        " of ", c.size, " used");
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    ManagedTensor t;
    t.name = prefix + p.key();
    t.param = p.value();
    t.chunk = k;
    t.offset = c.used;
    t.shape = t.param.sizes().vec();
    t.numel = t.param.numel();
    const int64_t id = take_parameter(module, std::move(t), on_grad);
    const ManagedTensor& taken = tensors_[static_cast<size_t>(id)];
    c.used += taken.numel;
    if (!c.remote && copy_values) {
      // Every rank builds the same initial model; only the owner keeps a chunk's values.
      master_view(taken).copy_(taken.param.detach());
      if (!format_.fp32) param_view(taken).copy_(taken.param.detach());
    }
    c.tensors.push_back(id);
  }
  repoint(k);  // frees the module's original storage
}

void ChunkStore::set_state(ManagedTensor& t, TensorState state) {
  Chunk& c = chunks_[static_cast<size_t>(t.chunk)];
  if (t.state == TensorState::kCompute && state != TensorState::kCompute) --c.compute_count;
  if (t.state != TensorState::kCompute && state == TensorState::kCompute) ++c.compute_count;
  t.state = state;
}

// ---- views and payloads ------------------------------------------------------------------------

torch::Tensor ChunkStore::view(const Block& block, c10::ScalarType type, int64_t offset,
                               const std::vector<int64_t>& shape) const {
  return tier_->view(block, type, offset, shape);
}

torch::Tensor ChunkStore::param_view(const ManagedTensor& t) const {
  if (t.split) {
    const Span& s = span(sharding_.group_of(t.chunk));
    PSTAR_INTERNAL_ASSERT(s.open(), "a view of ", t.name, " while its span is closed");
    return view(s.param, format_.dtype, t.offset, t.shape);
  }
  return view(chunks_[static_cast<size_t>(t.chunk)].param, format_.dtype, t.offset, t.shape);
}

torch::Tensor ChunkStore::master_view(const ManagedTensor& t) const {
  // A split module's tensor has no whole master anywhere: each part holds its piece.
  PSTAR_INTERNAL_ASSERT(!t.split, "the master weights of ", t.name, ", which lie in pieces");
  const Chunk& c = chunks_[static_cast<size_t>(t.chunk)];
  return view(format_.fp32 ? c.param : c.master, torch::kFloat32, t.offset, t.shape);
}

torch::Tensor ChunkStore::grad_view(const ManagedTensor& t) const {
  if (format_.reuse) return param_view(t);
  if (t.split)
    return view(span(sharding_.group_of(t.chunk)).grad, torch::kFloat32, t.offset, t.shape);
  return view(chunks_[static_cast<size_t>(t.chunk)].grad, torch::kFloat32, t.offset, t.shape);
}

const void* ChunkStore::grad_data(const Chunk& c) const {
  return format_.reuse ? c.param.data() : c.grad.data();
}

optim::GradType ChunkStore::grad_type() const {
  if (!format_.reuse) return optim::GradType::kF32;
  return format_.dtype == torch::kBFloat16 ? optim::GradType::kBF16 : optim::GradType::kF16;
}

void ChunkStore::repoint(int64_t k) {
  torch::NoGradGuard no_grad;
  const Chunk& c = chunks_[static_cast<size_t>(k)];
  const bool present = static_cast<bool>(c.param);
  for (int64_t id : c.tensors) {
    auto& t = tensors_[static_cast<size_t>(id)];
    if (t.split) continue;  // they follow their span (repoint_span)
    // A remote chunk between uses has no payload: its tensors hold nothing (Note [gathering]).
    set_data_keeping_accumulator(
        t.param,
        present ? param_view(t)
                : torch::empty(
                      {0}, torch::dtype(format_.dtype).device(tier_->device_of(c.compute_place))),
        t.accumulator);
    t.param.mutable_grad() = present ? grad_view(t) : torch::Tensor();
  }
}

const Block* ChunkStore::compute_block(const ManagedTensor& t) const {
  const Block& block = t.split ? span(sharding_.group_of(t.chunk)).param
                               : chunks_[static_cast<size_t>(t.chunk)].param;
  return block ? &block : nullptr;
}

Block ChunkStore::allocate_payload(Place place, int64_t bytes, bool moves, bool zeroed) {
  const bool host_only = place == Place::kHost && !moves;
  if (!zeroed) return tier_->allocate_unfilled(place, bytes, host_only);
  return host_only ? tier_->allocate_host_only(bytes) : tier_->allocate(place, bytes);
}

void ChunkStore::reserve_host_compute(const std::vector<int64_t>& sizes) {
  if (sizes.empty()) return;
  core::PhaseTimer timer(&setup_, core::SetupPhase::kAlloc);
  std::map<int64_t, int64_t> blocks;  // bytes -> count: one reservation per size
  for (int64_t size : sizes) {
    ++blocks[size * format_.elem_bytes];
    if (!format_.reuse) ++blocks[size * 4];
  }
  for (const auto& [bytes, count] : blocks) tier_->reserve_host(bytes, count);
}

void ChunkStore::zero_padding(int64_t k) {
  Chunk& c = chunks_[static_cast<size_t>(k)];
  if (c.remote || c.used == c.size) return;
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> rest = {c.size - c.used};
  view(c.param, format_.dtype, c.used, rest).zero_();
  // An NVMe chunk's master weights were staged zeroed (NvmeOptimizer::Use::kFresh).
  if (c.master && !c.nvme) view(c.master, torch::kFloat32, c.used, rest).zero_();
}

void ChunkStore::allocate_remote(int64_t k, Block param_slot) {
  Chunk& c = chunks_[static_cast<size_t>(k)];
  if (param_slot) {
    PSTAR_INTERNAL_ASSERT(
        param_slot.side() == c.compute_place && param_slot.bytes() == c.size * format_.elem_bytes,
        "chunk ", k, " lent a slot of another side or size");
    c.param = std::move(param_slot);
  } else {
    c.param = allocate_payload(c.compute_place, c.size * format_.elem_bytes, !c.host_only());
  }
  if (!format_.reuse) c.grad = allocate_payload(c.compute_place, c.size * 4, !c.host_only());
  add_bytes(c.compute_place, compute_bytes(k));
  record(k, formats::ChunkEventKind::kAllocate, compute_bytes(k));
}

void ChunkStore::free_remote(int64_t k) {
  Chunk& c = chunks_[static_cast<size_t>(k)];
  PSTAR_INTERNAL_ASSERT(c.compute_count == 0, "releasing chunk ", k, " while it is in use");
  c.param.reset();
  c.grad.reset();
  add_bytes(c.compute_place, -compute_bytes(k));
  repoint(k);
  record(k, formats::ChunkEventKind::kRelease, compute_bytes(k));
}

// ---- the NVMe tier -----------------------------------------------------------------------------

void ChunkStore::attach_nvme(std::unique_ptr<NvmeOptimizer> nvme) {
  PSTAR_INTERNAL_ASSERT(nvme_ == nullptr && chunks_.empty());
  nvme_ = std::move(nvme);
  add_bytes(Place::kHost, nvme_->pool_bytes());
  check_host();
}

void ChunkStore::allocate_nvme_compute_buffers() {
  core::PhaseTimer timer(&setup_, core::SetupPhase::kAlloc);
  // NVMe chunks are ordinary ones.
  const int64_t bytes = format_.chunk_size * format_.payload.compute();
  timer.set_bytes(bytes);
  nvme_param_ = tier_->allocate(Place::kHost, format_.chunk_size * format_.elem_bytes);
  if (!format_.reuse) nvme_grad_ = tier_->allocate(Place::kHost, format_.chunk_size * 4);
  add_bytes(Place::kHost, bytes);
  check_host();
}

void ChunkStore::stage(int64_t k, NvmeOptimizer::Use use) {
  Chunk& c = chunks_[static_cast<size_t>(k)];
  const StagedOptimizer s = nvme_->acquire(k, use);
  const int64_t bytes = format_.chunk_size * 4;
  // Views, not owners: the buffer stays the staging pool's.
  if (s.master != nullptr) c.master = Block(s.master, bytes, Place::kHost, nullptr);
  c.exp_avg = Block(s.exp_avg, bytes, Place::kHost, nullptr);
  c.exp_avg_sq = Block(s.exp_avg_sq, bytes, Place::kHost, nullptr);
  staged_.chunk = k;
  staged_.dirty = false;
}

void ChunkStore::stage_optimizer(int64_t k, bool write) {
  if (!chunks_[static_cast<size_t>(k)].nvme) return;
  if (staged_.chunk != k) {
    unstage_optimizer();
    stage(k, NvmeOptimizer::Use::kHostAccess);
  }
  staged_.dirty = staged_.dirty || write;
}

void ChunkStore::unstage_optimizer() {
  if (staged_.chunk < 0) return;
  Chunk& c = chunks_[static_cast<size_t>(staged_.chunk)];
  c.master.reset();
  c.exp_avg.reset();
  c.exp_avg_sq.reset();
  const int64_t k = staged_.chunk;
  staged_.chunk = -1;
  nvme_->release(k, staged_.dirty);
}

// ---- moves -------------------------------------------------------------------------------------

// Replaces `block` by a copy of it in `moved`, a block of its size at the destination; `ahead`: a
// prefetch (Note [prefetch]).
void ChunkStore::moved_to(Block& block, Block moved, bool ahead) {
  if (ahead)
    tier_->copy_ahead(moved, block, block.bytes());
  else
    tier_->copy(moved, block, block.bytes());
  block = std::move(moved);
}

void ChunkStore::move_compute(int64_t k, Place to, bool ahead) {
  Chunk& c = chunks_[static_cast<size_t>(k)];
  if (c.compute_place == to) return;
  PSTAR_INTERNAL_ASSERT(!c.remote, "moving chunk ", k, ", which another rank owns");
  PSTAR_INTERNAL_ASSERT(!c.adam.queued(), "moving chunk ", k, " while its host Adam is queued");
  PSTAR_INTERNAL_ASSERT(c.compute_count == 0, "moving chunk ", k, " while it is in use");
  if (listeners_.move_guard) listeners_.move_guard(k);
  const auto begin = std::chrono::steady_clock::now();
  // Both destinations first (the copies write all of them): when the device has no room (Note
  // [fragmented arena]) the chunk stays whole where it was.
  Block param = tier_->allocate_uninitialized(to, c.param.bytes());
  Block grad = format_.reuse ? Block() : tier_->allocate_uninitialized(to, c.grad.bytes());
  moved_to(c.param, std::move(param), ahead);
  if (!format_.reuse) moved_to(c.grad, std::move(grad), ahead);
  c.upload = ahead ? Upload::kInFlight : Upload::kSettled;
  const int64_t bytes = compute_bytes(k);
  add_bytes(c.compute_place, -bytes);
  add_bytes(to, bytes);
  (to == Place::kDevice ? traffic_.h2d : traffic_.d2h) += bytes;
  if (ahead) traffic_.prefetched += bytes;
  c.compute_place = to;
  repoint(k);
  const double seconds = seconds_since(begin);
  traffic_.move_s += seconds;
  record(
      k,
      to == Place::kDevice ? formats::ChunkEventKind::kMoveH2D : formats::ChunkEventKind::kMoveD2H,
      bytes, seconds);
}

void ChunkStore::move_optimizer_state(int64_t k, Place to) {
  Chunk& c = chunks_[static_cast<size_t>(k)];
  if (c.optimizer_place == to) return;
  const auto begin = std::chrono::steady_clock::now();
  for (Block* b : {&c.master, &c.exp_avg, &c.exp_avg_sq})
    if (*b) moved_to(*b, tier_->allocate_uninitialized(to, b->bytes()), /*ahead=*/false);
  traffic_.move_s += seconds_since(begin);
  const int64_t bytes = optimizer_bytes(k);
  add_bytes(c.optimizer_place, -bytes);
  add_bytes(to, bytes);
  (to == Place::kDevice ? traffic_.h2d : traffic_.d2h) += bytes;
  c.optimizer_place = to;
  record(
      k,
      to == Place::kDevice ? formats::ChunkEventKind::kMoveH2D : formats::ChunkEventKind::kMoveD2H,
      bytes);
}

void ChunkStore::await_upload(int64_t k) {
  Chunk& c = chunks_[static_cast<size_t>(k)];
  if (c.upload != Upload::kInFlight) return;
  // Copied ahead (Note [prefetch]): the module's compute, queued next, waits for it here.
  tier_->await_copies(c.param);
  if (c.grad) tier_->await_copies(c.grad);
  c.upload = Upload::kSettled;
}

}  // namespace pstar::engine
