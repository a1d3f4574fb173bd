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
// fp32), made when speculation is first chosen for as many host chunks as engine.host_memory has
// room for (logged), counted in the host budget; a chunk without a slot waits for the norm as
// before.
// NVMe chunks and host-only chunks (use_cpu_embedding) are not speculated. Whether a step
// speculates is the trainer's call (plan::RunPlan::Speculation).
// The norm needs every speculated chunk's sum of squares, which the worker computes just before
// that chunk's Adam. On the ordered worker it would wait behind the updates queued before it, so
// the norm would wait for nearly all of host Adam (the H200 ledger of 2026-11-27: the optimizer
// part grew from 0.33 to 1.16 s at 7.46B). Since speculation leaves the gradient intact, the norm
// takes a sum the worker has not started out of its queue (core::OrderedWorker::drop) and computes
// it itself, with the same function and floating-point state, so the bits are the same.
// What a speculated step may cost beyond waiting (issue 56; the H200 ledger of 2026-11-27 had it
// 26% slower than waiting with nothing rolled back):
//   - no extra bytes: a chunk is speculated only where host Adam stores the redirected span
//     non-temporally (optim::redirected_streams; Note [streaming stores]), so a speculated pass
//     moves the bytes of an exact one;
//   - stop early: the sums of squares of the speculated chunks that the worker has computed add up
//     to a lower bound on this rank's, and so on the step's, squared norm. Once that passes the
//     clip (SpeculationRound), no further chunk is speculated and the speculative updates not yet
//     started are cancelled; when the norm says the step clipped or overflowed, so are all those
//     still queued. A cancelled chunk is updated once, in place, after the norm; only a chunk
//     whose speculative update ran is redone (a rollback: one more pass);
//   - forward order: every host Adam job runs in the order the next forward needs its chunk (the
//     worker's priority; the sums of squares first, and an NVMe chunk's early update in the order
//     its read was announced: Note [nvme staging]), and the slots go to the first host chunks in
//     that order, so the forward never waits behind a chunk it needs later;
//   - nothing allocated: slots are made when speculation is first chosen, after a planned step,
//     from the room engine.host_memory leaves beside what the tier's pools needed in the steps
//     before (their peak, moves in flight included) and one compute payload more, so that a steady
//     step neither grows nor trims them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "adam_steps.h"
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
  // The jobs of other chunks queued ahead of the ones the training thread waited for (Note
  // [speculative adam]: forward order): 0 when every wait is for the job next in line.
  int64_t waited_behind = 0;
  // Note [speculative adam]: early chunks queued speculatively; those of them redone (their
  // speculative update ran, then the step clipped) and those cancelled before they started; the
  // seconds of host Adam that started in the backward, and of the redone chunks' Adam (counted
  // when the worker finishes them).
  int64_t speculated = 0, rolled_back = 0, cancelled = 0;
  double early_s = 0, rollback_s = 0;
  // Seconds of every host chunk's Adam finished this step, on the worker or in place.
  double host_s = 0;
  // Note [host adam bytes]: the host Adam passes this step runs (queued, or speculative and not
  // cancelled), and the host memory they read and write.
  int64_t passes = 0;
  int64_t host_bytes = 0;
};

// Note [speculative adam]: this step's lower bound on the squared norm. The worker adds up the sums
// of squares it computes for speculated chunks and stops speculation once they pass the clip;
// partial and stop_above are the worker's while the step speculates (stop_above is set before
// any job is queued), stopped is read by both threads.
struct SpeculationRound {
  std::atomic<bool> stopped{false};
  double partial = 0;
  double stop_above = 0;  // this rank's sum of squares above which the step surely clips
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
  // Per-tensor step counts and this step's held tensors (Note [held parameters]): set before the
  // last backward, as the early updates start there.
  AdamSteps& tensor_steps() { return tensor_steps_; }
  // After the plan: the order the next forward first needs the chunks in, which update() queues
  // host chunks in and the worker runs every chunk's jobs in (Note [speculative adam]).
  void set_order(std::vector<int64_t> order);
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
  // The update this step makes unless it clips or overflows (Note [speculative adam]), once
  // provide_slots made slots; `stop_above`: the sum of squares of this rank's gradients above
  // which the step surely clips (infinity: it never clips; a non-finite sum, an overflow, stops
  // speculation too).
  void speculate(double lr, double grad_multiplier, double stop_above);
  // Rollback slots for up to `chunks` host chunks, as the host budget allows beside `reserve`
  // bytes more than the tier's pools hold; returns how many there are.
  int64_t provide_slots(int64_t chunks, int64_t reserve);
  const SpeculationSlots* slots() const { return slots_.get(); }
  // In the last micro-batch's backward, after the plan, when the update is expected or speculated:
  // every host chunk of this rank outside the margin whose gradients are final (`final_grads`: all
  // in and no longer in use; on several ranks, reduced) goes to the host now (it would at the
  // optimizer step anyway) and its sum of squares and Adam are queued, to run during the rest of
  // the backward (speculated: into a rollback slot, for the chunks the slots are kept for, until
  // the sums show the step clips).
  void start_early_updates(const std::function<bool(int64_t)>& final_grads);
  // A step without an update (fp16 overflow): every speculated chunk's slot is dropped, once the
  // worker is done reading the chunk; speculative updates not started are cancelled.
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
                          const optim::AdamHyper& hyper, float multiplier, optim::AdamSpan span,
                          const std::vector<AdamRun>* runs);
  // Chunk k's host Adam ran: its events (and its NVMe read and write-back).
  enum class JobKind : uint8_t { kLater, kEarly, kRedo };
  void record_host(int64_t k, double seconds, bool nvme, double read_wait_s);
  // Note [host adam bytes]: chunk k gets one more host Adam pass this step (`redirected`: into a
  // slot); count_zeroing: the zeroing of its separate gradient alone (a committed speculation's).
  void count_pass(int64_t k, bool redirected);
  void count_zeroing(int64_t k);
  // The worker's priority of chunk k's jobs (Note [speculative adam]: forward order); the sums of
  // squares run before every update.
  int64_t priority(int64_t k) const;
  static constexpr int64_t kSumPriority = 0;
  // `speculative`: queued into chunk k's slot (c.adam.slot), cancellable.
  void queue_host(int64_t k, const optim::AdamHyper& hyper, float multiplier, bool with_sq,
                  JobKind kind, bool speculative = false);
  // Settles a speculated chunk whose queued work is done: commit or drop its slot.
  void resolve_slot(int64_t k);
  // update(): the fate of every speculated chunk, now that the update is known. Returns the
  // chunks to update (again, or, cancelled, for the first time) in place.
  // Each with whether its speculative update ran (a rollback: redone) or was cancelled.
  std::vector<std::pair<int64_t, bool>> decide_speculation(double lr, double grad_multiplier);
  // Runs `f` on every chunk, in the order the worker runs their jobs (forward order first).
  void in_run_order(const std::function<void(int64_t)>& f) const;
  // Whether chunk k may take a rollback slot this step: the first host chunks in forward order
  // that speculation can run on, as many as there are slots.
  bool slot_kept_for(int64_t k) const;
  void keep_slots();

  ChunkStore& store_;
  optim::AdamHyper settings_;
  int64_t world_size_ = 1;
  int64_t steps_ = 0;
  AdamSteps tensor_steps_;
  bool updated_ = false;  // this step's update ran
  std::vector<int64_t> order_;
  std::vector<int64_t> position_;  // chunk -> its place in order_ (order_.size(): none)
  std::vector<bool> slot_kept_;    // per chunk: keep_slots()
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
  std::shared_ptr<SpeculationRound> round_;  // this speculating step's; its jobs hold it
  // Last member: destroyed first, so a running Adam finishes before any payload is freed.
  std::unique_ptr<core::OrderedWorker> worker_;
};

}  // namespace pstar::engine
