// Collectives between the ranks of a data-parallel run. The run's are LibTorch's c10d: a TCPStore
// for the rendezvous (rank 0 hosts it) and ProcessGroupGloo between CPU tensors. The chunk engine
// needs only what Communicator offers, so no c10d header leaks into the engine.
//
// Note [ring collectives]
// LibTorch 1.13's Gloo group has no reduce_scatter and no bf16 at all. Chunk groups are therefore
// all-gathered and reduce-scattered as rings of c10d send/recv: N - 1 rounds in which every rank
// sends one part to the next rank and receives one from the previous, which is also the
// bandwidth-optimal schedule (each rank sends (N - 1) / N of the group once). Payloads travel as
// raw bytes, so any dtype works; reductions add in fp32 whatever the gradient dtype.
//
// Note [device collectives]
// NCCL moves GPU memory between GPUs, so the NCCL communicator (connect_nccl, issue 36) says
// on_device(): the engine hands it device pointers (Note [staged collectives] in
// engine/group_sync.h stages a host-side payload through a device block). Each collective is
// issued under a guard for the rank's GPU from the engine's communication thread, on that thread's
// current stream: the tier's communication stream, ordered after the compute that prepared the
// collective's buffers (Note [communication stream] in pstar/tier/device_tier.h), or the default
// stream where the model computes when that is switched off. c10d's NCCL stream waits for the
// current stream first, so it reads what was queued before it. The call then blocks its own
// thread (never the main one) until its stream has finished, so it returns with its result
// complete, as every communicator does. A device communicator's collectives are flat (Note [flat
// collectives]). The loss, the norm and the flags are all-reduced in fp64 on the device;
// exchange() and barrier() stay on the Gloo communicator the run started with, whose TCPStore the
// NCCL group rendezvous through. A collective that waits longer than the run's timeout throws
// DistError (c10d's blocking wait), before c10d's watchdog, set later, would tear the process
// down.
//
// Note [flat collectives]
// NCCL's all-gather and reduce-scatter run as rings over one buffer that holds every rank's part
// side by side (all_gather_into_tensor and reduce_scatter_tensor in Python, _allgather_base and
// _reduce_scatter_base in C++): each rank sends (N - 1) / N of the group once. Separate parts
// would need N broadcasts or N reduces, one after another, up to N / (N - 1) of the ring's time
// (2x at N = 2). So the engine hands a device communicator flat buffers only (GroupSync, Note
// [flat gathers] in engine/group_sync.h): all_gather's parts lie side by side, and a reduction
// comes as reduce_scatter_flat over a buffer of N parts of fp32, which the engine fills with this
// rank's gradients and whose memory it counts in the device budget. The Gloo rings take separate
// parts and need no such buffer (their reduce_scatter adds each part as it passes); their
// reduce_scatter_flat, the base class's, runs through reduce_scatter.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pstar/dist/world.h"

namespace pstar::dist {

struct CommStats {
  int64_t bytes_sent = 0;  // payload bytes this rank sent
  double seconds = 0;      // wall time inside collectives, waiting for other ranks included
};

// What the chunk engine needs of the other ranks. The run's communicator is a GlooCommunicator
// (connect_gloo), or on GPUs an NCCL one (connect_nccl); tests may stand in one of their own
// (tests/engine/dist/thread_ranks.h runs ranks as threads of one process). Every
// rank calls the collectives in the same order; each call returns once this rank's result is
// complete.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual const WorldInfo& world() const = 0;
  int64_t rank() const { return world().rank; }
  int64_t world_size() const { return world().world_size; }

  // Note [device collectives]: whether the collectives move the memory of this rank's compute
  // device (NCCL between GPUs) rather than host memory (Gloo's rings). The pointers they are given
  // are then device memory, and the engine hands them flat buffers only (Note [flat
  // collectives]): all_gather's parts side by side, reductions through reduce_scatter_flat.
  virtual bool on_device() const { return false; }

  // parts[r] is rank r's `bytes` bytes: this rank's is read, every other one is written.
  virtual void all_gather(const std::vector<void*>& parts, int64_t bytes) = 0;
  // Sums part j over the ranks for every j and leaves the sum of part rank() in `out` (numel
  // floats). add_local(j, acc) adds this rank's contribution to part j into acc.
  virtual void reduce_scatter(int64_t numel,
                              const std::function<void(int64_t part, float* acc)>& add_local,
                              float* out) = 0;
  // Note [flat collectives]: `flat` holds world_size() parts of `numel` floats side by side, this
  // rank's contribution to each; leaves the sum of part rank() over the ranks in that part's own
  // slot (the other slots are left undefined). On this communicator's side. The base class's runs
  // reduce_scatter over the slots.
  virtual void reduce_scatter_flat(float* flat, int64_t numel);
  // In place, over all ranks.
  virtual void all_reduce_sum(std::vector<double>& values) = 0;
  double all_reduce_sum(double value);
  virtual void barrier() = 0;
  // Every rank's `mine`, in rank order, through the store: for start-up checks.
  virtual std::vector<std::string> exchange(const std::string& key, const std::string& mine) = 0;

  // Counters since the last call: payload bytes this rank sent (N - 1 parts per all-gather and
  // reduce-scatter, the values of an all-reduce) and the seconds spent in collectives.
  virtual CommStats take_stats() = 0;
};

// Joins the run `world` describes over c10d's Gloo (Note [ring collectives]). DistError naming
// the address, the port and what to change when the port is taken, the master cannot be reached
// within `timeout`, or a peer is missing. A collective that waits longer than `timeout` fails the
// same way (never a hang).
std::unique_ptr<Communicator> connect_gloo(const WorldInfo& world, std::chrono::seconds timeout);

// Why this build of pstar has no NCCL communicator, for messages (Note [rank device] in
// pstar/plan/rank_device.h); empty in a build that has one (PSTAR_HAVE_NCCL_COMMUNICATOR: a CUDA
// LibTorch 2.x with c10d's ProcessGroupNCCL, libengine/src/dist/sources.cmake).
std::string nccl_missing_reason();

// Note [device collectives]. Moves the run onto NCCL between the ranks' GPUs: `host` (the run's
// Gloo communicator, whose store the NCCL group rendezvous through) stays inside for exchange()
// and barrier(); chunk groups and scalars go over c10d's ProcessGroupNCCL on cuda:`device`.
// DistError naming the rank and device when the group does not form within `timeout`; a build
// without one throws ConfigError with nccl_missing_reason().
std::unique_ptr<Communicator> connect_nccl(std::unique_ptr<Communicator> host, int device,
                                           std::chrono::seconds timeout);

}  // namespace pstar::dist
