// Hybrid Adam (Note [host adam overlap] in engine/chunked_engine.h): the margin's Adam on the
// device, the rest on the host, queued on a worker thread (core::OrderedWorker) after the warm-up
// when engine.overlap_adam is on, with tickets the training thread awaits where it next touches a
// chunk, and early updates in the last backward, exact or speculative. The only part of the engine
// that includes the worker. It decides no placement: it acts on the chunks where they are.
//
// Note [speculative adam]
// With gradient_clipping or fp16 the update needs the gradient norm, known only after the whole
// backward. Speculation starts a host chunk's Adam in the backward anyway (as the early updates of
// Note [host adam overlap], once the chunk's gradients are final: on several ranks once its group
// is reduced), with the multiplier the step has if nothing clips or overflows (1 / loss scale),
// and writes the new parameters, master weights and moments into a rollback slot
// (SpeculationSlots) instead of over the chunk's own (optim::AdamSpan's *_out: the same bits as in
// place). The chunk keeps everything it had, its gradient too, which under param/grad reuse is the
// parameter payload Adam would otherwise overwrite. When the step's update is known:
//   - it is the speculated one (no clipping, no overflow): the slot's blocks become the chunk's
//     (a swap, no copy) once the chunk's queued work is awaited;
//   - it clipped: the slot is dropped and the chunk's Adam is queued again with the true
//     multiplier, in place, behind the speculative one on the ordered worker (counted as a
//     rollback);
//   - it overflowed (no update): the slot is dropped before the parameters are restored from the
//     masters, which speculation never touched.
// So losses, checkpoints and the state are bit-identical to engine.overlap_adam false whether
// steps clip or not. Slots are host memory beside the chunks (14 bytes a parameter in bf16, 12 in
// fp32), made after the warm-up for as many host chunks as engine.host_memory has room for
// (logged), counted in the host budget; a chunk without a free slot waits for the norm as before.
// NVMe chunks and host-only chunks (use_cpu_embedding) are not speculated. Whether a step
// speculates is the trainer's call (plan::RunPlan::Speculation).
// The norm needs every speculated chunk's sum of squares, which the worker computes just before
// that chunk's Adam. On the ordered worker it would wait behind the updates queued before it, so
// the norm would wait for nearly all of host Adam (the H200 ledger of 2026-11-27: the optimizer
// part grew from 0.33 to 1.16 s at 7.46B). Since speculation leaves the gradient intact, the norm
// takes a sum the worker has not started itself (AdamJob::sq_claim: the first thread to claim it
// computes it, with the same function and floating-point state, so the bits are the same).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "chunk_store.h"
#include "pstar/optim/host_adam.h"
#include "speculation.h"

namespace pstar::core {
class OrderedWorker;
}

namespace pstar::engine {

// A step's Adam figures for the metrics.
struct AdamFigures {
  int64_t device_chunks = 0;
  // Host chunks whose Adam was queued on the worker, those of them queued early (in the
  // backward), and the time spent waiting for queued work.
  int64_t queued = 0, early = 0;
  double wait_s = 0;
  // Note [speculative adam]: early chunks updated speculatively, and those of them redone; the
  // seconds of host Adam that started in the backward, and of the redone chunks' Adam (counted
  // when the worker finishes them).
  int64_t speculated = 0, rolled_back = 0;
  double early_s = 0, rollback_s = 0;
  // Seconds of every host chunk's Adam finished this step, on the worker or in place, and the
  // host memory it read and wrote (Note [host adam bytes]).
  double host_s = 0;
  int64_t host_bytes = 0;
};

class HybridAdam {
 public:
  // `settings`: the run's Adam hyperparameters (lr and step are set per update); `overlap`: queue
  // the host's share on a worker; `world_size`: reduced gradients are sums over the ranks.
  HybridAdam(ChunkStore& store, const optim::AdamHyper& settings, bool overlap, int64_t world_size);
  ~HybridAdam();

  bool overlapping() const { return worker_ != nullptr; }
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // After the plan: the order update() queues host chunks in (the next forward's first needs).
  void set_order(std::vector<int64_t> order) { order_ = std::move(order); }
  AdamFigures& figures() { return figures_; }

  // Chunk k's payloads are about to be touched: its queued Adam must have finished.
  void await_chunk(int64_t k);
  // Whether chunk k's queued Adam has finished (true when none is queued).
  bool finished(int64_t k) const;
  void await_all();
  // Every queued Adam but this step's early ones, which run on through the backward and the
  // optimizer step into the next forward.
  void await_queued();
  // The observer is the training thread's: the worker's finished Adam steps are recorded here.
  void record_finished();

  // The update this step will make, when the trainer knows it before the backward.
  void expect(double lr, double grad_multiplier) {
    expected_ = Expected{lr, grad_multiplier, false};
  }
  // The update this step makes unless it clips or overflows (Note [speculative adam]).
  void speculate(double lr, double grad_multiplier) {
    if (slots_ != nullptr && slots_->size() > 0) expected_ = Expected{lr, grad_multiplier, true};
  }
  // After the plan: rollback slots for up to `chunks` host chunks, as the host budget allows;
  // returns how many were made.
  int64_t provide_slots(int64_t chunks);
  const SpeculationSlots* slots() const { return slots_.get(); }
  // In the last micro-batch's backward, after the plan, when the update is expected or speculated:
  // every host chunk of this rank outside the margin whose gradients are final (`final_grads`: all
  // in and no longer in use; on several ranks, reduced) goes to the host now (it would at the
  // optimizer step anyway) and its sum of squares and Adam are queued, to run during the rest of
  // the backward (speculated: into a rollback slot, while one is free).
  void start_early_updates(const std::function<bool(int64_t)>& final_grads);
  // A step without an update (fp16 overflow): every speculated chunk's slot is dropped, once the
  // worker is done reading the chunk.
  void discard_speculation();
  // The optimizer step begins: the previous step's queued Adam is done, and this step's early
  // chunks have their sums of squares.
  void await_for_optimizer();
  // One update: the margin's on the device, then the host's (queued after the plan with overlap).
  void update(double lr, double grad_multiplier, bool planned);
  bool updated() const { return updated_; }
  // The step ended: the expected update and the early marks are forgotten (a queued Adam runs on).
  void end_step();
  void begin_step();

 private:
  optim::AdamHyper hyper(double lr, int64_t step) const;
  float multiplier(double grad_multiplier) const;
  optim::AdamSpan span(int64_t k);
  optim::AdamSpan compute_span(const Chunk& c, void* param, const void* grad) const;
  double device_nvme_step(int64_t k, const optim::AdamHyper& hyper, float multiplier);
  NvmeOptimizer* nvme_for(int64_t k);
  // Returns the seconds an NVMe chunk waited for its read (0 otherwise).
  static double host_step(tier::DeviceTier& tier, NvmeOptimizer* nvme, int64_t k,
                          const optim::AdamHyper& hyper, float multiplier, optim::AdamSpan span);
  // Chunk k's host Adam ran: its events (and its NVMe read and write-back).
  enum class JobKind : uint8_t { kLater, kEarly, kRedo };
  void record_host(int64_t k, double seconds, bool nvme, double read_wait_s);
  // `slot` >= 0: speculated into that rollback slot.
  void queue_host(int64_t k, const optim::AdamHyper& hyper, float multiplier, bool with_sq,
                  JobKind kind, int slot = -1);
  // Settles a speculated chunk whose queued work is done: commit or drop its slot.
  void resolve_slot(int64_t k);
  // update(): the fate of every speculated chunk, now that the update is known. Returns the
  // chunks to update again.
  std::vector<int64_t> decide_speculation(double lr, double grad_multiplier);

  ChunkStore& store_;
  optim::AdamHyper settings_;
  int64_t world_size_ = 1;
  int64_t steps_ = 0;
  bool updated_ = false;  // this step's update ran
  std::vector<int64_t> order_;
  struct Expected {
    double lr = 0, multiplier = 0;
    bool speculative = false;
  };
  std::optional<Expected> expected_;
  AdamFigures figures_;
  struct Done {
    int64_t chunk = 0;
    double seconds = 0;
    bool nvme = false;
    double read_wait_s = 0;
    JobKind kind = JobKind::kLater;
  };
  std::mutex done_mutex_;
  std::vector<Done> done_;                   // guarded by done_mutex_: the worker appends
  std::unique_ptr<SpeculationSlots> slots_;  // null until provide_slots
  // Last member: destroyed first, so a running Adam finishes before any payload is freed.
  std::unique_ptr<core::OrderedWorker> worker_;
};

}  // namespace pstar::engine
