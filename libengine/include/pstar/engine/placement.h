// The chunk engine's placement policy (Note [placement] in engine/chunked_engine.h): it records the
// warm-up iterations, fixes the margin, and answers which chunks to evict or prefetch at a moment,
// as chunk ids. It decides; the chunk store acts. Pure C++ (no LibTorch, no payloads), so it is
// built and tested on its own (tests/engine/engine/placement_test.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pstar/chunk/access_trace.h"

namespace pstar::engine {

// What placement is told about the device at a moment: the store's facts, without payloads.
struct DeviceRoom {
  // Movable chunks (this rank's, not in the margin, not host-only) whose compute payloads are on
  // the device, ascending.
  std::vector<int64_t> resident;
  // Of `resident`, those no tensor is computing with (they may leave).
  std::vector<int64_t> idle;
  int64_t margin_bytes = 0;    // compute and optimizer payloads of the margin
  int64_t gathered_bytes = 0;  // other ranks' chunks gathered onto the device
  int64_t capacity_bytes = 0;  // what the device tier can hold of chunks
};

// An upload plan for the next moment (Note [prefetch]): evict these, then start `fetch` uploads.
struct PrefetchPlan {
  std::vector<int64_t> evict;
  int64_t fetch = 0;
};

struct PlacementSettings {
  int64_t warmup_iterations = 1;
  bool prefetch = true;
  int64_t device_budget = 0;  // bytes
  // Per chunk (Note [mixed chunk sizes] in pstar/chunk/eviction.h): its compute payloads, and
  // those with its optimizer payloads.
  std::vector<int64_t> compute_bytes;
  std::vector<int64_t> whole_bytes;
};

// Note [fixed trace]
// Placement plans from the warm-up's trace by position: the t-th moment of every later iteration
// is taken to use what the warm-up's t-th used, and prefetch reads moment t + 1's. A model whose
// modules ran in an order that depends on its data (a mixture of experts that skipped the experts
// no token chose) would shift every later moment, and under ZeRO would have ranks issue different
// collectives and hang. So a model runs every module every micro-batch (model/moe.cpp runs idle
// experts on an empty batch), and open_moment checks each moment's module against the warm-up's:
// an InternalError naming both, never a silent misplan.
class Placement {
 public:
  explicit Placement(const PlacementSettings& settings);

  // ---- the recorder (Note [placement]) ----
  // A step begins: moments count from the first again.
  void begin_iteration();
  // The window of the current moment closed with `non_model` bytes at most besides chunks: keeps
  // the highest per moment (before the first moment, the window after last step's optimizer).
  void close_window(int64_t non_model);
  // A moment named `name` opens, in the backward pass or not.
  void open_moment(const std::string& name, bool in_backward);
  // What the open moment uses: chunks on the device, and communication groups.
  void record_use(std::vector<int64_t> chunks, std::vector<int64_t> groups);
  // The step ended. True when the warm-up just finished: the caller fixes the margin (margin_size,
  // then set_margin) before the next step.
  bool end_iteration();

  int64_t moment() const { return moment_; }         // -1 before the first of this step
  int64_t iterations() const { return iteration_; }  // iterations finished
  bool planned() const { return planned_; }
  const chunk::AccessTrace& trace() const { return trace_; }
  const std::vector<std::string>& moment_names() const { return moment_names_; }

  // ---- the plan after the warm-up ----
  // How many of `candidates` (in the order they would join) stay on the device for good, with
  // their optimizer state: all of them when they fit under kDeviceFillRatio of the budget less the
  // peak non-model bytes (and the tier's capacity), else the first ones that leave room for the
  // largest working set plus the largest chunk.
  // `gathered_bytes`: what the other ranks' gathered chunks may hold on the device at once beside
  // them (gathered_peak_bytes), which the working sets of the trace do not show.
  int64_t margin_size(const std::vector<int64_t>& candidates, int64_t capacity_bytes,
                      int64_t gathered_bytes = 0) const;
  // After the plan: the most device bytes the groups gathered at one moment hold, with group g's
  // gathered copies taking group_bytes[g], as settle keeps them (the groups a moment uses and those
  // it keeps for later in its pass, Note [gathering]); the groups reductions drop earlier only
  // lower it.
  int64_t gathered_peak_bytes(const std::vector<int64_t>& group_bytes) const;
  // The margin is fixed: the optimizer moment keeps `margin` (ascending) on the device, and the
  // next-use index is built over `num_chunks`.
  void set_margin(const std::vector<int64_t>& margin, int64_t num_chunks);
  // After the plan, per moment: the groups used again before the moment's pass ends.
  const std::vector<int64_t>& kept_after(int64_t moment) const;
  // After the plan: the groups the moment after `moment` uses (Note [collectives beside compute]
  // in engine/group_sync.h gathers them ahead); empty before the plan and past the last moment.
  const std::vector<int64_t>& groups_after(int64_t moment) const;
  // Over the trace's moments: the highest non-model peak, and the most chunks one moment uses and
  // the most compute bytes (the optimizer moment's are the margin once set_margin ran).
  int64_t peak_non_model() const;
  int64_t largest_working_set() const;
  int64_t largest_working_set_bytes() const;
  int64_t compute_bytes(int64_t chunk) const {
    return settings_.compute_bytes[static_cast<size_t>(chunk)];
  }

  // ---- decisions at a moment ----
  // The bytes of movable compute payloads that fit on the device at the current moment of the plan.
  int64_t movable_room_bytes(const DeviceRoom& room) const;
  // After the plan: movable_room_bytes less the compute payloads of the movable chunks resident
  // now; negative when they hold more than the room.
  int64_t free_movable_bytes(const DeviceRoom& room) const;
  // The chunks to evict so that `need` (ascending, distinct), of whose compute payloads
  // `missing_bytes` are off the device, fit: in the warm-up every idle chunk not needed; after it,
  // furthest next use first (Note [eviction order]) until the bytes fit. OutOfMemoryError naming
  // `what` when the idle chunks cannot make room.
  std::vector<int64_t> evictions(const std::vector<int64_t>& need, int64_t missing_bytes,
                                 const DeviceRoom& room, const std::string& what) const;
  // The idle resident chunks not in `need` (ascending), in the order they would leave: furthest
  // next use first after the warm-up, by id during it (Note [fragmented arena]).
  std::vector<int64_t> eviction_order(const std::vector<int64_t>& need,
                                      const DeviceRoom& room) const;
  // The chunks the next moment uses, when uploads may start for it now (after the warm-up, and
  // not for the optimizer step); empty otherwise.
  std::vector<int64_t> prefetch_candidates() const;
  // Room for the first of `wanted` uploads (those of prefetch_candidates the caller can start, in
  // order) beside `need_now`.
  PrefetchPlan prefetch(const std::vector<int64_t>& wanted, const std::vector<int64_t>& need_now,
                        const DeviceRoom& room) const;

 private:
  void plan_kept_groups();
  int64_t bytes_of(const std::vector<int64_t>& chunks) const;
  static std::vector<int64_t> idle_not_needed(const std::vector<int64_t>& need,
                                              const DeviceRoom& room);

  PlacementSettings settings_;
  int64_t iteration_ = 0;  // iterations finished
  int64_t moment_ = -1;
  std::vector<std::vector<int64_t>> accesses_;  // this step's, per moment
  std::vector<int64_t> non_model_;              // this step's, per moment
  std::vector<std::vector<int64_t>> groups_;    // this step's, per moment
  std::vector<bool> backward_;                  // this step's, per moment
  std::vector<int64_t> warmup_non_model_;       // running max over the warm-up iterations
  std::vector<std::string> moment_names_;       // the first iteration's
  chunk::AccessTrace trace_;
  std::optional<chunk::NextUse> next_use_;
  std::vector<std::vector<int64_t>> kept_after_;
  std::vector<std::vector<int64_t>> planned_groups_;  // the warm-up's groups, per moment
  bool planned_ = false;
};

}  // namespace pstar::engine
