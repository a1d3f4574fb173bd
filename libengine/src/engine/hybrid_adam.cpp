#include "hybrid_adam.h"

#include <chrono>
#include <cmath>

#include "pstar/base/error.h"
#include "pstar/core/clock.h"
#include "pstar/core/ordered_worker.h"

namespace pstar::engine {

using core::seconds_since;

HybridAdam::HybridAdam(ChunkStore& store, const optim::AdamHyper& settings, bool overlap,
                       int64_t world_size)
    : store_(store), settings_(settings), world_size_(world_size), tensor_steps_(store) {
  if (overlap) worker_ = std::make_unique<core::OrderedWorker>();
}

HybridAdam::~HybridAdam() = default;

void HybridAdam::set_order(std::vector<int64_t> order) {
  order_ = std::move(order);
  position_.assign(static_cast<size_t>(store_.num_chunks()), static_cast<int64_t>(order_.size()));
  for (size_t i = 0; i < order_.size(); ++i)
    position_[static_cast<size_t>(order_[i])] = static_cast<int64_t>(i);
}

// Note [speculative adam]: forward order. Before the plan (no order yet) every chunk has the same
// priority: queue order.
int64_t HybridAdam::priority(int64_t k) const {
  const auto kk = static_cast<size_t>(k);
  return 1 + (kk < position_.size() ? position_[kk] : static_cast<int64_t>(order_.size()));
}

void HybridAdam::in_run_order(const std::function<void(int64_t)>& f) const {
  for (int64_t k : order_) f(k);
  for (int64_t k = 0; k < store_.num_chunks(); ++k)
    if (priority(k) == 1 + static_cast<int64_t>(order_.size())) f(k);
}

void HybridAdam::await_chunk(int64_t k) {
  Chunk& c = store_.chunk(k);
  if (c.adam.queued()) {
    if (worker_->done(c.adam.ticket)) {
      worker_->wait(c.adam.ticket);  // rethrows an Adam that failed
    } else {
      figures_.waited_behind += worker_->queued_ahead(c.adam.ticket);
      const auto begin = std::chrono::steady_clock::now();
      worker_->wait(c.adam.ticket);
      figures_.wait_s += seconds_since(begin);
    }
    c.adam.ticket = 0;
    c.adam.stage =
        c.adam.stage == AdamStage::kEarlyQueued ? AdamStage::kEarlyDone : AdamStage::kIdle;
  }
  // Nothing of this chunk is queued now: a decided speculation settles (Note [speculative adam]).
  if (c.adam.slot >= 0 && c.adam.fate != SlotFate::kUndecided) resolve_slot(k);
}

void HybridAdam::resolve_slot(int64_t k) {
  Chunk& c = store_.chunk(k);
  if (c.adam.fate == SlotFate::kCommit) {
    slots_->commit(k, c.adam.slot);
  } else {
    slots_->give_back(c.adam.slot);
  }
  c.adam.slot = -1;
  c.adam.fate = SlotFate::kUndecided;
  c.adam.speculative.reset();
}

int64_t HybridAdam::provide_slots(int64_t chunks, int64_t reserve) {
  if (slots_ == nullptr) slots_ = std::make_unique<SpeculationSlots>(store_);
  return slots_->provide(chunks, reserve);
}

bool HybridAdam::finished(int64_t k) const {
  const Chunk& c = store_.chunks()[static_cast<size_t>(k)];
  return !c.adam.queued() || worker_->done(c.adam.ticket);
}

// In the worker's order, so that no wait is for a job behind one not yet awaited.
void HybridAdam::await_all() {
  if (worker_ == nullptr) return;
  in_run_order([this](int64_t k) { await_chunk(k); });
  record_finished();
}

void HybridAdam::await_queued() {
  if (worker_ == nullptr) return;
  in_run_order([this](int64_t k) {
    if (!store_.chunk(k).adam.early()) await_chunk(k);
  });
  record_finished();
}

void HybridAdam::record_finished() {
  if (worker_ == nullptr) return;
  std::vector<Done> done;
  {
    const std::lock_guard<std::mutex> lock(done_mutex_);
    done.swap(done_);
  }
  for (const Done& d : done) {
    record_host(d.chunk, d.seconds, d.nvme, d.read_wait_s);
    if (d.kind == JobKind::kEarly) figures_.early_s += d.seconds;
    if (d.kind == JobKind::kRedo) figures_.rollback_s += d.seconds;
  }
}

// Note [host adam bytes]
// One host Adam pass in place reads each of the chunk's payloads once (gradient, parameters or the
// parameter slot holding the gradient, master, moments; a separate bf16 parameter copy is written
// with ordinary stores, which read its lines first) and writes each once (parameters, master,
// moments, and the separate gradient it zeroes): twice the chunk's whole payload bytes per element
// in use. A speculated pass (Note [speculative adam]) reads the same and writes the slot's
// parameters, master and moments with streaming stores, which read nothing; it leaves a separate
// gradient to be zeroed once the speculation stands (4 bytes an element, counted then). Passes are
// counted when they are queued, a speculated one when the step's norm has settled that it runs, so
// a step's figure is its own work even where the worker finishes it in the next step. The gradient
// norm's reads are counted apart (EngineMetrics::grad_norm_host_bytes). The bytes, over the host's
// memory bandwidth, are a lower bound on host Adam's time.
void HybridAdam::count_pass(int64_t k, bool redirected) {
  const ChunkFormat& f = store_.format();
  int64_t per_element = 2 * f.payload.whole();
  if (redirected && !f.reuse) per_element -= 4 + (f.fp32 ? 0 : f.elem_bytes);
  ++figures_.passes;
  figures_.host_bytes += per_element * store_.chunk(k).used;
}

void HybridAdam::count_zeroing(int64_t k) { figures_.host_bytes += 4 * store_.chunk(k).used; }

void HybridAdam::record_host(int64_t k, double seconds, bool nvme, double read_wait_s) {
  figures_.host_s += seconds;
  const int64_t bytes = store_.optimizer_bytes(k);
  if (nvme) store_.record(k, formats::ChunkEventKind::kNvmeRead, bytes, read_wait_s);
  store_.record(k, formats::ChunkEventKind::kAdamHost, bytes, seconds);
  if (nvme) store_.record(k, formats::ChunkEventKind::kNvmeWrite, bytes);
}

optim::AdamHyper HybridAdam::hyper(double lr, int64_t step) const {
  optim::AdamHyper h = settings_;
  h.lr = static_cast<float>(lr);
  h.step = step;
  return h;
}

// Reduced gradients are sums over the ranks: Adam takes their mean.
float HybridAdam::multiplier(double grad_multiplier) const {
  return static_cast<float>(grad_multiplier / static_cast<double>(world_size_));
}

// Note [nvme tier]: an NVMe chunk whose compute payloads stay on the device. They are copied into
// the store's host buffers, updated there by host Adam with the staged optimizer payloads, and
// the parameters copied back, all on the training thread. Two synchronisations each (counted in
// device_syncs): before the copy out, so that the previous chunk's copy back from the same buffer
// has read it (the tier orders copies per direction, not across), and before host Adam reads what
// the copies wrote.
double HybridAdam::device_nvme_step(int64_t k, const optim::AdamHyper& hyper, float multiplier) {
  Chunk& c = store_.chunk(k);
  const ChunkFormat& f = store_.format();
  tier::DeviceTier& tier = store_.tier();
  Block& param = store_.nvme_param_buffer();
  Block& grad = store_.nvme_grad_buffer();
  // NVMe chunks are ordinary ones (the buffers' size).
  const int64_t param_bytes = f.chunk_size * f.elem_bytes;
  PSTAR_INTERNAL_ASSERT(c.size == f.chunk_size, "NVMe chunk ", k, " of ", c.size, " elements");
  store_.synchronize();
  tier.copy(param, c.param, param_bytes);
  if (!f.reuse) tier.copy(grad, c.grad, f.chunk_size * 4);
  store_.traffic().d2h += store_.compute_bytes(k);
  store_.synchronize();
  const double read_wait_s = host_step(
      tier, store_.nvme(), k, hyper, multiplier,
      compute_span(c, param.data(), f.reuse ? param.data() : grad.data()), tensor_steps_.runs(k));
  tier.copy(c.param, param, param_bytes);
  store_.traffic().h2d += param_bytes;
  return read_wait_s;
}

// The span's compute side over `param` and `grad` (chunk c's payloads or copies of them); its
// optimizer payloads are left to the caller (the fp32 master is the param).
optim::AdamSpan HybridAdam::compute_span(const Chunk& c, void* param, const void* grad) const {
  const ChunkFormat& format = store_.format();
  optim::AdamSpan span;
  span.master = format.fp32 ? static_cast<float*>(param) : nullptr;
  span.grad = grad;
  span.grad_type = store_.grad_type();
  span.param_out = format.fp32 ? nullptr : param;
  span.param_out_type = format.fp32                        ? optim::ParamOutType::kNone
                        : format.dtype == torch::kBFloat16 ? optim::ParamOutType::kBF16
                                                           : optim::ParamOutType::kF16;
  span.numel = c.used;
  return span;
}

optim::AdamSpan HybridAdam::span(int64_t k) {
  Chunk& c = store_.chunk(k);
  PSTAR_INTERNAL_ASSERT(c.compute_place == c.optimizer_place, "chunk ", k,
                        "'s compute payloads are not beside its optimizer state");
  optim::AdamSpan span = compute_span(c, c.param.data(), store_.grad_data(c));
  // An NVMe chunk's optimizer payloads are filled in where its Adam runs (host_step).
  if (c.nvme) return span;
  if (!store_.format().fp32) span.master = static_cast<float*>(c.master.data());
  span.exp_avg = static_cast<float*>(c.exp_avg.data());
  span.exp_avg_sq = static_cast<float*>(c.exp_avg_sq.data());
  return span;
}

// Host Adam of chunk k over `span`; an NVMe chunk's optimizer payloads are staged around it (Note
// [nvme staging]): read (or found ahead), updated, written back behind.
double HybridAdam::host_step(tier::DeviceTier& tier, NvmeOptimizer* nvme, int64_t k,
                             const optim::AdamHyper& hyper, float multiplier, optim::AdamSpan span,
                             const std::vector<AdamRun>* runs) {
  if (nvme == nullptr) {
    AdamSteps::run(tier, Place::kHost, hyper, multiplier, span, runs);
    return 0;
  }
  const StagedOptimizer staged = nvme->acquire(k, NvmeOptimizer::Use::kAdam);
  if (staged.master != nullptr) span.master = staged.master;
  span.exp_avg = staged.exp_avg;
  span.exp_avg_sq = staged.exp_avg_sq;
  AdamSteps::run(tier, Place::kHost, hyper, multiplier, span, runs);
  nvme->release(k, /*dirty=*/true);
  return staged.wait_s;
}

// The NVMe tier of chunk k's Adam, announced for read-ahead; null when it is not on NVMe.
NvmeOptimizer* HybridAdam::nvme_for(int64_t k) {
  if (!store_.chunk(k).nvme) return nullptr;
  store_.unstage_optimizer();  // what host code staged is written back before Adam stages
  store_.nvme()->announce(k);
  return store_.nvme();
}

// Queues host chunk k's Adam on the worker; `with_sq`: first its gradient's sum of squares, into
// early_sq. Without param/grad reuse the gradient payload is zeroed for the next step right after
// its Adam, there too, but for a speculated chunk (Note [speculative adam]): a redo may need it.
void HybridAdam::queue_host(int64_t k, const optim::AdamHyper& hyper, float multiplier,
                            bool with_sq, JobKind kind, bool speculative) {
  Chunk& c = store_.chunk(k);
  const optim::AdamSpan span =
      speculative ? slots_->redirect(this->span(k), c.adam.slot) : this->span(k);
  tier::DeviceTier* tier = &store_.tier();
  // Only a speculated chunk's gradient outlives its Adam (which writes elsewhere): an Adam in
  // place overwrites it under param/grad reuse, so its sum is the worker's, before that Adam.
  std::shared_ptr<SpeculativeJob> job = speculative ? std::make_shared<SpeculativeJob>() : nullptr;
  std::shared_ptr<SpeculationRound> round = speculative ? round_ : nullptr;
  c.adam.speculative = job;
  if (with_sq) {
    double* out = &c.adam.early_sq;
    c.adam.sq_ticket = worker_->submit(
        [tier, span, out, round] {
          *out = tier->grad_sq_sum(Place::kHost, span.grad, span.grad_type, span.numel);
          if (round == nullptr) return;
          // The lower bound on the squared norm: once past the clip, the step surely clips.
          round->partial += *out;
          if (!std::isfinite(round->partial) || round->partial > round->stop_above)
            round->stopped.store(true);
        },
        kSumPriority, k);
  }
  Block* grad = store_.format().reuse || speculative ? nullptr : &c.grad;
  HybridAdam* self = this;
  NvmeOptimizer* nvme = nvme_for(k);
  // A copy: the runs change at the next step's hold, while this job may still wait in the queue.
  const std::vector<AdamRun>* own_runs = tensor_steps_.runs(k);
  const bool with_runs = own_runs != nullptr;
  std::vector<AdamRun> runs = with_runs ? *own_runs : std::vector<AdamRun>{};
  // An NVMe chunk's early update runs in the order its read was announced (Note [nvme staging]).
  const int64_t at = kind == JobKind::kEarly && nvme != nullptr ? kSumPriority : priority(k);
  c.adam.ticket = worker_->submit(
      [self, tier, nvme, k, hyper, multiplier, span, grad, kind, job, round, with_runs,
       runs = std::move(runs)] {
        // Cancelled by the step's norm, or by the sums seen so far: it never starts.
        if (job && !job->start(round->stopped.load())) return;
        const auto begin = std::chrono::steady_clock::now();
        const double read_wait_s =
            host_step(*tier, nvme, k, hyper, multiplier, span, with_runs ? &runs : nullptr);
        if (grad != nullptr) tier->zero(*grad, span.numel * 4);
        const double seconds = seconds_since(begin);
        const std::lock_guard<std::mutex> lock(self->done_mutex_);
        self->done_.push_back(Done{k, seconds, nvme != nullptr, read_wait_s, kind});
      },
      at, k);
  c.adam.stage = with_sq ? AdamStage::kEarlyQueued : AdamStage::kQueued;
  if (speculative) {
    c.adam.fate = SlotFate::kUndecided;
    ++figures_.speculated;
  } else {
    count_pass(k, /*redirected=*/false);
  }
  ++figures_.queued;
}

void HybridAdam::speculate(double lr, double grad_multiplier, double stop_above) {
  if (slots_ == nullptr || slots_->size() == 0) return;
  expected_ = Expected{lr, grad_multiplier, true};
  round_ = std::make_shared<SpeculationRound>();
  round_->stop_above = stop_above;
  keep_slots();
}

// Note [speculative adam]: the slots go to the first chunks the next forward needs, so that those
// are updated in the backward and the forward does not wait for them.
void HybridAdam::keep_slots() {
  slot_kept_.assign(static_cast<size_t>(store_.num_chunks()), false);
  int64_t left = slots_->size();
  for (int64_t k : order_) {
    if (left == 0) break;
    const Chunk& c = store_.chunk(k);
    // Not the chunks whose state a rollback could not keep beside them, nor a module's own
    // oversized chunk (the slots are ordinary chunks).
    if (c.remote || c.margin() || c.nvme || c.host_only() || c.used == 0 ||
        c.size != store_.chunk_size())
      continue;
    slot_kept_[static_cast<size_t>(k)] = true;
    --left;
  }
}

bool HybridAdam::slot_kept_for(int64_t k) const {
  return static_cast<size_t>(k) < slot_kept_.size() && slot_kept_[static_cast<size_t>(k)];
}

void HybridAdam::start_early_updates(const std::function<bool(int64_t)>& final_grads) {
  if (worker_ == nullptr || !expected_) return;
  const optim::AdamHyper h = hyper(expected_->lr, steps_ + 1);
  const float m = multiplier(expected_->multiplier);
  for (int64_t k = 0; k < store_.num_chunks(); ++k) {
    const Chunk& c = store_.chunk(k);
    if (c.remote || c.margin() || c.adam.early() || c.used == 0 || !final_grads(k)) continue;
    if (!expected_->speculative) {
      store_.move_compute(k, Place::kHost);
      ++figures_.early;
      queue_host(k, h, m, /*with_sq=*/true, JobKind::kEarly);
      continue;
    }
    // Note [speculative adam]: the rest wait for the norm once the sums show the step clips.
    if (!slot_kept_for(k)) continue;
    if (round_->stopped.load()) return;
    const int slot = slots_->take();
    PSTAR_INTERNAL_ASSERT(slot >= 0, "no free rollback slot for chunk ", k);
    store_.move_compute(k, Place::kHost);
    // A span host Adam cannot stream would read every line it writes: the chunk waits instead.
    if (!optim::redirected_streams(slots_->redirect(span(k), slot))) {
      slots_->give_back(slot);
      slot_kept_[static_cast<size_t>(k)] = false;
      continue;
    }
    store_.chunk(k).adam.slot = slot;
    ++figures_.early;
    queue_host(k, h, m, /*with_sq=*/true, JobKind::kEarly, /*speculative=*/true);
  }
}

std::vector<std::pair<int64_t, bool>> HybridAdam::decide_speculation(double lr,
                                                                     double grad_multiplier) {
  std::vector<std::pair<int64_t, bool>> in_place;
  if (!expected_ || !expected_->speculative) return in_place;
  const bool stands = expected_->lr == lr && expected_->multiplier == grad_multiplier;
  // The sums of squares are all in (await_for_optimizer): `stopped` is final. Unless it is set,
  // nothing cancels a speculative update that stands.
  const bool stopped = round_->stopped.load();
  tier::DeviceTier* tier = &store_.tier();
  for (int64_t k = 0; k < store_.num_chunks(); ++k) {
    Chunk& c = store_.chunk(k);
    if (c.adam.slot < 0) continue;
    SpeculativeJob& job = *c.adam.speculative;
    const bool ran = stands && !stopped ? !job.cancelled() : !job.cancel();
    if (ran) count_pass(k, /*redirected=*/true);
    if (!ran) worker_->drop(c.adam.ticket);  // nothing to wait behind
    if (stands && ran) {
      c.adam.fate = SlotFate::kCommit;
      if (!store_.format().reuse) {
        // The early path's zeroing of the gradient, behind the speculative Adam that kept it.
        Block* grad = &c.grad;
        const int64_t bytes = c.used * 4;
        c.adam.ticket =
            worker_->submit([tier, grad, bytes] { tier->zero(*grad, bytes); }, priority(k), k);
        c.adam.stage = AdamStage::kEarlyQueued;
        count_zeroing(k);
      }
      continue;
    }
    // Clipped or overflowed: redone in place behind what ran, or, cancelled, updated once.
    c.adam.fate = SlotFate::kDiscard;
    ++(ran ? figures_.rolled_back : figures_.cancelled);
    in_place.emplace_back(k, ran);
  }
  return in_place;
}

void HybridAdam::discard_speculation() {
  for (int64_t k = 0; k < store_.num_chunks(); ++k) {
    Chunk& c = store_.chunk(k);
    if (c.adam.slot < 0) continue;
    if (c.adam.speculative->cancel()) {
      worker_->drop(c.adam.ticket);
      ++figures_.cancelled;
    } else {
      count_pass(k, /*redirected=*/true);
    }
    c.adam.fate = SlotFate::kDiscard;
    await_chunk(k);  // the speculative Adam still reads the chunk's payloads
    c.adam.stage = AdamStage::kIdle;
  }
}

void HybridAdam::await_for_optimizer() {
  await_queued();
  for (Chunk& c : store_.chunks()) {
    if (c.adam.sq_ticket == 0) continue;
    // A speculated chunk's sum the worker has not started is taken out of its queue and computed
    // here: the sums start before any update, but not before the one the worker is running. The
    // same function of the same bytes, under the same floating-point state (the worker runs a job
    // with its submitter's), gives the same bits.
    if (c.adam.speculative && worker_->drop(c.adam.sq_ticket)) {
      c.adam.early_sq =
          store_.tier().grad_sq_sum(Place::kHost, store_.grad_data(c), store_.grad_type(), c.used);
    } else {
      const auto begin = std::chrono::steady_clock::now();
      worker_->wait(c.adam.sq_ticket);
      figures_.wait_s += seconds_since(begin);
    }
    c.adam.sq_ticket = 0;
  }
}

void HybridAdam::update(double lr, double grad_multiplier, bool planned) {
  PSTAR_INTERNAL_ASSERT(!expected_ || expected_->speculative ||
                            (expected_->lr == lr && expected_->multiplier == grad_multiplier),
                        "the update differs from the one expected before the backward");
  const optim::AdamHyper h = hyper(lr, ++steps_);
  updated_ = true;
  // The device tier's Adam gives host Adam's bits (Note [device tier]), so placement never changes
  // the numbers.
  const float m = multiplier(grad_multiplier);
  // Note [speculative adam]: speculated chunks keep their slot's state, or are updated again with
  // the true multiplier, behind their speculative Adam on the ordered worker.
  for (const auto& [k, ran] : decide_speculation(lr, grad_multiplier))
    queue_host(k, h, m, /*with_sq=*/false, ran ? JobKind::kRedo : JobKind::kLater);
  // The margin's Adam first: on a GPU it is queued and runs while the host updates the rest, each
  // host chunk as soon as its own eviction has landed. Chunks are independent, so the order does
  // not change the numbers.
  for (int64_t k = 0; k < store_.num_chunks(); ++k) {
    const Chunk& c = store_.chunk(k);
    if (c.remote || c.optimizer_place != Place::kDevice) continue;
    const auto begin = std::chrono::steady_clock::now();
    AdamSteps::run(store_.tier(), Place::kDevice, h, m, span(k), tensor_steps_.runs(k));
    ++figures_.device_chunks;
    store_.record(k, formats::ChunkEventKind::kAdamDevice, store_.optimizer_bytes(k),
                  seconds_since(begin));
  }
  // After the warm-up, with engine.overlap_adam, the host's share goes to the worker in the order
  // the next forward needs it (Note [host adam overlap]); the warm-up's last update comes before
  // the plan moves the margin's optimizer state, so it runs here.
  const bool queue = worker_ != nullptr && planned;
  std::vector<int64_t> in_chunk_order;
  if (!queue)
    for (int64_t k = 0; k < store_.num_chunks(); ++k) in_chunk_order.push_back(k);
  std::vector<int64_t> host, device_nvme;
  for (int64_t k : queue ? order_ : in_chunk_order) {
    const Chunk& c = store_.chunk(k);
    // Early chunks are updated (or, speculated and redone, queued again above) already.
    if (c.remote || c.optimizer_place != Place::kHost || c.adam.early() || c.adam.slot >= 0)
      continue;
    (c.nvme && c.compute_place == Place::kDevice ? device_nvme : host).push_back(k);
  }
  if (!device_nvme.empty()) {
    // On this thread, before the rest is queued: early updates on the worker may hold the pool.
    await_all();
    for (int64_t k : device_nvme) nvme_for(k);
    for (int64_t k : device_nvme) {
      const auto begin = std::chrono::steady_clock::now();
      const double read_wait_s = device_nvme_step(k, h, m);
      record_host(k, seconds_since(begin), /*nvme=*/true, read_wait_s);
      count_pass(k, /*redirected=*/false);
    }
  }
  if (!queue) {
    // Every NVMe chunk is announced first, so that reads run ahead of the updates.
    std::vector<NvmeOptimizer*> nvme;
    for (int64_t k : host) nvme.push_back(nvme_for(k));
    for (size_t i = 0; i < host.size(); ++i) {
      const int64_t k = host[i];
      const auto begin = std::chrono::steady_clock::now();
      const double read_wait_s =
          host_step(store_.tier(), nvme[i], k, h, m, span(k), tensor_steps_.runs(k));
      record_host(k, seconds_since(begin), nvme[i] != nullptr, read_wait_s);
      count_pass(k, /*redirected=*/false);
    }
    return;
  }
  for (int64_t k : host) queue_host(k, h, m, /*with_sq=*/false, JobKind::kLater);
}

void HybridAdam::end_step() {
  tensor_steps_.end_step(updated_);
  updated_ = false;
  expected_.reset();
  for (Chunk& c : store_.chunks()) {
    if (c.adam.stage == AdamStage::kEarlyQueued) c.adam.stage = AdamStage::kQueued;
    if (c.adam.stage == AdamStage::kEarlyDone) c.adam.stage = AdamStage::kIdle;
  }
}

void HybridAdam::begin_step() {
  figures_ = AdamFigures{};
  expected_.reset();
}

}  // namespace pstar::engine
