// Per-tensor Adam step counts and the parameters a step leaves alone (Note [held parameters]):
// which elements of a chunk its Adam updates at which step count. Hybrid Adam owns one and runs
// every chunk's Adam through run(). Moves nothing and knows no worker.
//
// Note [held parameters]
// torch's Adam/AdamW skips a parameter whose gradient is None: no update, no weight decay, its
// moments and its own step count left as they are; the next update it gets uses that count for the
// bias corrections. A mixture of experts' expert that receives no token in a whole step, on any
// rank, has such a gradient in Hugging Face's per-expert modules (their forward never calls it),
// so the trainer tells the engine before the last backward (ParamEngine::skip_update), when every
// rank knows the step's routing. Here that becomes, per chunk, runs of elements with their own
// step count (a tensor that missed n updates runs n behind the step's count) and held runs: the
// update writes, for a held run, only what an update that changes nothing would
// (optim::host_adam_hold: the parameter copy from the master, which under param/grad reuse holds
// the zero gradient; the state unchanged into a speculation's rollback slot). Chunks whose tensors
// all run at the step's count, every chunk of a dense model, take one pass as before. The counts
// of updates missed are the same on every rank and go into checkpoints
// (checkpoint::adam_missed_of).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "chunk_store.h"
#include "pstar/optim/host_adam.h"

namespace pstar::engine {

// Elements [begin, begin + numel) of a chunk: `lag` updates behind the step's count, or held.
struct AdamRun {
  int64_t begin = 0, numel = 0;
  int64_t lag = 0;
  bool held = false;
};

class AdamSteps {
 public:
  explicit AdamSteps(const ChunkStore& store) : store_(store) {}

  // This step's update leaves these tensors (ids into the store's tensors) as they are.
  void hold(const std::vector<int64_t>& ids);
  // The step ended; `updated`: its update ran, so the held tensors missed one more.
  void end_step(bool updated);
  int64_t missed(int64_t id) const;
  void set_missed(int64_t id, int64_t count);

  // Chunk k's runs that differ from the step's count, in element order; null when none does.
  const std::vector<AdamRun>* runs(int64_t k) const;
  // Adam over `span` (a chunk's, at its element 0) with `runs` (null: all of it at hyper.step): the
  // elements between runs at hyper.step, each run at its own count or held.
  static void run(tier::DeviceTier& tier, Place side, const optim::AdamHyper& hyper,
                  float multiplier, const optim::AdamSpan& span, const std::vector<AdamRun>* runs);

 private:
  void rebuild();

  const ChunkStore& store_;
  std::vector<int64_t> missed_;  // per tensor: updates it missed (empty: none ever)
  std::vector<bool> held_;       // per tensor, this step (empty: none)
  std::unordered_map<int64_t, std::vector<AdamRun>> runs_;  // per chunk with a run that differs
};

}  // namespace pstar::engine
