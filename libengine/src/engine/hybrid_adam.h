// Hybrid Adam (Note [host adam overlap] in engine/chunked_engine.h): the margin's Adam on the
// device, the rest on the host, queued on a worker thread (core::OrderedWorker) after the warm-up
// when engine.overlap_adam is on, with tickets the training thread awaits where it next touches a
// chunk, and early updates in the last backward. The only part of the engine that includes the
// worker. It decides no placement: it acts on the chunks where they are.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "chunk_store.h"
#include "pstar/optim/host_adam.h"

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
    expected_ = std::make_pair(lr, grad_multiplier);
  }
  // In the last micro-batch's backward, after the plan, on one rank (`eligible`), when the update
  // is expected: every host chunk of this rank outside the margin whose gradients are all in and no
  // longer in use goes to the host now (it would at the optimizer step anyway) and its sum of
  // squares and Adam are queued, to run during the rest of the backward.
  void start_early_updates(bool eligible);
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
  void record_host(int64_t k, double seconds, bool nvme, double read_wait_s);
  void queue_host(int64_t k, const optim::AdamHyper& hyper, float multiplier, bool with_sq);

  ChunkStore& store_;
  optim::AdamHyper settings_;
  int64_t world_size_ = 1;
  int64_t steps_ = 0;
  bool updated_ = false;  // this step's update ran
  std::vector<int64_t> order_;
  std::optional<std::pair<double, double>> expected_;  // (lr, multiplier)
  AdamFigures figures_;
  struct Done {
    int64_t chunk = 0;
    double seconds = 0;
    bool nvme = false;
    double read_wait_s = 0;
  };
  std::mutex done_mutex_;
  std::vector<Done> done_;  // guarded by done_mutex_: the worker appends
  // Last member: destroyed first, so a running Adam finishes before any payload is freed.
  std::unique_ptr<core::OrderedWorker> worker_;
};

}  // namespace pstar::engine
