// The chunk store: chunks, their tensors and views, their payloads and where each is, the moves
// between the places, and the bytes each place holds. It acts; it decides nothing (placement does,
// engine/placement.h). Private to the chunk engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "nvme_optimizer.h"
#include "pstar/chunk/sharding.h"
#include "pstar/core/setup_phases.h"
#include "pstar/engine/observer.h"
#include "pstar/memory/stat.h"
#include "pstar/optim/host_adam.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/tier/device_tier.h"

namespace pstar::engine {

// Where a payload is: one of the device tier's two places.
using Place = tier::Side;
using tier::Block;

// PatrickStar's tensor lifecycle. Only chunks with no tensor in kCompute may move.
enum class TensorState { kHold, kCompute, kHoldAfterFwd, kHoldAfterBwd };

// What a chunk may do, fixed at start-up except that the plan promotes kMovable to kMargin.
enum class Residence : uint8_t {
  kMovable,   // computes on the device when used, waits on the host otherwise
  kMargin,    // stays on the device with its optimizer state, updated there (Note [placement])
  kHostOnly,  // use_cpu_embedding: always on the host
};

// An upload of the compute payloads (Note [prefetch]).
enum class Upload : uint8_t {
  kSettled,   // nothing in flight
  kInFlight,  // copied ahead to the device; compute has not waited for it yet
};

// The chunk's host Adam on the worker (Note [host adam overlap]).
enum class AdamStage : uint8_t {
  kIdle,         // nothing queued, not updated early this step
  kQueued,       // queued by update(); the ticket is its job
  kEarlyQueued,  // queued in this step's backward, after its sum of squares (sq_ticket)
  kEarlyDone,    // updated early this step, awaited
};

// What a speculated chunk's slot becomes once its queued work is awaited (Note [speculative adam]).
enum class SlotFate : uint8_t {
  kUndecided,  // the step's norm is not known yet
  kCommit,     // the speculation stands: the slot's state becomes the chunk's
  kDiscard,    // the step clipped or overflowed: the slot is given back unused
};

// A speculated chunk's Adam on the worker, shared by the training thread and the worker (Note
// [speculative adam]): it starts only if nothing cancelled it first, the step's norm (it clipped
// or overflowed) or the worker, once the sums of squares it has seen show the step clips.
struct SpeculativeJob {
  enum State : uint8_t { kQueued, kRunning, kCancelled };
  std::atomic<uint8_t> adam{kQueued};
  // The worker, as the job starts: false when it was cancelled (or is, `cancel` set).
  bool start(bool cancel) {
    uint8_t expected = kQueued;
    if (cancel) adam.compare_exchange_strong(expected, kCancelled);
    expected = kQueued;
    return adam.compare_exchange_strong(expected, kRunning);
  }
  // Cancels the job if it has not started; whether it will not run (now or before).
  bool cancel() {
    uint8_t expected = kQueued;
    return adam.compare_exchange_strong(expected, kCancelled) || expected == kCancelled;
  }
  bool cancelled() const { return adam.load() == kCancelled; }
};

struct AdamJob {
  AdamStage stage = AdamStage::kIdle;
  int64_t ticket = 0;     // the worker's ticket while queued
  int64_t sq_ticket = 0;  // the early sum of squares' job until the optimizer step waits for it
  double early_sq = 0;    // its result, valid once sq_ticket was waited for (or the sum taken)
  std::shared_ptr<SpeculativeJob> speculative;  // while speculated (Note [speculative adam])
  int slot = -1;  // speculated into this rollback slot (Note [speculative adam]), or -1
  SlotFate fate = SlotFate::kUndecided;
  bool queued() const { return stage == AdamStage::kQueued || stage == AdamStage::kEarlyQueued; }
  bool early() const { return stage == AdamStage::kEarlyQueued || stage == AdamStage::kEarlyDone; }
};

struct Chunk {
  int64_t size = 0;  // capacity, elements (Note [mixed chunk sizes] in pstar/chunk/eviction.h)
  int64_t used = 0;  // elements
  std::vector<int64_t> tensors;
  // Compute payloads: they move together between places.
  Block param;  // compute dtype
  Block grad;   // fp32; only without param/grad reuse
  // Optimizer payloads: they stay at optimizer_place. On NVMe (`nvme`), they are views of a
  // staging buffer while host code works on them through the store (stage_optimizer), else empty.
  Block master;  // fp32; absent in fp32 training (the param is the master)
  Block exp_avg, exp_avg_sq;
  bool nvme = false;  // optimizer payloads in an NVMe slot (Note [nvme tier])
  Place compute_place = Place::kHost;
  Place optimizer_place = Place::kHost;
  bool remote = false;  // owned by another rank: payloads only while gathered (Note [gathering])
  // Its part of a split module's group, or -1 (Note [split modules] in pstar/plan/chunk_layout.h):
  // its tensors lie in the group's span, which the compute payloads of an owned part only fill.
  int64_t part = -1;
  Residence residence = Residence::kMovable;
  Upload upload = Upload::kSettled;
  AdamJob adam;
  int64_t compute_count = 0;  // tensors in kCompute
  int64_t grads_missing = 0;  // tensors whose gradient has not arrived this micro-batch

  bool split() const { return part >= 0; }
  bool margin() const { return residence == Residence::kMargin; }
  bool host_only() const { return residence == Residence::kHostOnly; }
  // Owned, and may move between the places.
  bool movable() const { return !remote && residence == Residence::kMovable; }
};

struct ManagedTensor {
  std::string name;
  torch::Tensor param;
  int64_t chunk = 0;   // a split module's: its group's first part (Note [split modules])
  int64_t offset = 0;  // elements into the chunk's payloads, or into the split module's span
  bool split = false;  // of a split module: it computes on the span, owned piece by piece
  std::vector<int64_t> shape;
  int64_t numel = 0;
  TensorState state = TensorState::kHold;
  bool grad_seen = false;     // its gradient arrived this micro-batch (its group's count)
  bool grad_arrived = false;  // its gradient arrived this micro-batch (Chunk::grads_missing)
  // Its gradient accumulator across moves (Note [one accumulator per tensor]).
  std::weak_ptr<torch::autograd::Node> accumulator;
};

// The elements of a tensor this rank keeps: [begin, end) of its flattened elements, at `offset` in
// chunk `chunk`'s payloads; none (begin == end) where another rank owns them. The whole tensor
// where this rank owns its chunk, its piece in this rank's part of a split module (Note [split
// modules]).
struct OwnedPiece {
  int64_t chunk = 0, offset = 0, begin = 0, end = 0;
  int64_t numel() const { return end - begin; }
};

// The element type of a chunk's compute payloads and which payloads exist (Note [param/grad
// reuse]).
struct ChunkFormat {
  c10::ScalarType dtype = torch::kFloat32;
  int64_t elem_bytes = 4;
  bool fp32 = true;    // the param payload is the master
  bool reuse = false;  // gradients overwrite the parameter slot
  plan::PayloadBytes payload;
  // The ordinary chunk's elements; a module larger than it has a chunk of its own, sized to it
  // (Note [mixed chunk sizes] in pstar/chunk/eviction.h). NVMe slots are ordinary chunks.
  int64_t chunk_size = 0;
};

// Traffic of one step.
struct Traffic {
  int64_t h2d = 0, d2h = 0;
  int64_t prefetched = 0;  // of h2d: copied ahead of use (Note [prefetch])
  double move_s = 0;       // the training thread's time in moves (allocation, copy, re-pointing)
  int64_t syncs = 0;       // whole-device synchronisations by the engine
  int64_t trims = 0;       // the tier's host pools trimmed to stay in engine.host_memory
};

// Note [split modules] in pstar/plan/chunk_layout.h: a split module's group while gathered holds
// its parts' compute payloads side by side in one block, the span, on the side they compute on.
// The other ranks' parts are views of it (filled by the gather); this rank's part is copied into
// its slot, while the part's own payloads stay where placement keeps them and receive the reduced
// gradients. The module's tensors are views of the span, and hold nothing while it is closed.
struct Span {
  Block param, grad;             // grad: fp32, without param/grad reuse
  std::vector<int64_t> tensors;  // its modules' (the last group's may hold several)
  int64_t used = 0;              // elements its tensors take
  bool open() const { return static_cast<bool>(param); }
};

class ChunkStore {
 public:
  // `sizes`: each chunk's planned capacity (plan::ChunkLayout::sizes); chunks past them (the
  // empty ones that complete the last group) are ordinary. `parts`: each chunk's part of a split
  // module, or -1 (plan::ChunkLayout::parts; empty: none).
  ChunkStore(std::unique_ptr<tier::DeviceTier> tier, const ChunkFormat& format,
             chunk::Sharding sharding, std::vector<int64_t> sizes, std::vector<int64_t> parts = {});

  tier::DeviceTier& tier() const { return *tier_; }
  const ChunkFormat& format() const { return format_; }
  const chunk::Sharding& sharding() const { return sharding_; }
  int64_t chunk_size() const { return format_.chunk_size; }  // the ordinary one
  int64_t size(int64_t k) const { return chunks_[static_cast<size_t>(k)].size; }
  // Chunk k's payloads: compute (they move), optimizer (they stay), and both.
  int64_t compute_bytes(int64_t k) const { return size(k) * format_.payload.compute(); }
  int64_t optimizer_bytes(int64_t k) const { return size(k) * format_.payload.optimizer(); }
  int64_t whole_bytes(int64_t k) const { return size(k) * format_.payload.whole(); }
  // An ordinary chunk's optimizer payloads: an NVMe slot.
  int64_t ordinary_optimizer_bytes() const {
    return format_.chunk_size * format_.payload.optimizer();
  }

  std::vector<Chunk>& chunks() { return chunks_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  Chunk& chunk(int64_t k) { return chunks_[static_cast<size_t>(k)]; }
  int64_t num_chunks() const { return static_cast<int64_t>(chunks_.size()); }
  std::vector<ManagedTensor>& tensors() { return tensors_; }
  const std::vector<ManagedTensor>& tensors() const { return tensors_; }
  // The tensors of a registered module; ConfigError for a module the engine does not manage.
  const std::vector<int64_t>& tensors_of(torch::nn::Module& module) const;
  const ManagedTensor& tensor(const std::string& name) const;
  int64_t tensor_id(const std::string& name) const;  // InternalError for an unknown name

  // Set-up phases timed inside the store (Note [set-up phases]): payload allocation (kAlloc).
  const core::SetupPhases& setup_phases() const { return setup_; }

  // ---- bytes per place ----
  const memory::Stat& device_bytes() const { return bytes_.device; }
  const memory::Stat& host_bytes() const { return bytes_.host; }
  // The host's peak restarts at what it holds now (a step begins).
  void reset_host_peak() { bytes_.host.reset_peak(); }
  // Other ranks' chunks gathered onto the device (with the collectives' own device blocks, Note
  // [flat gathers] in group_sync.h), and the margin's payloads.
  int64_t gathered_device_bytes() const;
  int64_t margin_bytes() const;
  void set_budgets(int64_t device, int64_t host);
  int64_t device_budget() const { return budgets_.device; }
  int64_t host_budget() const { return budgets_.host; }
  // Host memory the store's owners hold beside the chunks (speculation's rollback slots): counted
  // like payloads (negative: given back).
  void add_host_bytes(int64_t bytes) { add_bytes(Place::kHost, bytes); }
  // The same for either side: the collectives' blocks (Note [staged collectives], Note [flat
  // gathers]).
  void add_side_bytes(tier::Side side, int64_t bytes) {
    if (side == tier::Side::kDevice) bytes_.collective_device += bytes;
    add_bytes(side == tier::Side::kDevice ? Place::kDevice : Place::kHost, bytes);
  }
  // OutOfMemoryError when the host holds more than its budget, payloads or pools.
  void check_host();
  void check_host_pools();

  // ---- observer and traffic ----
  void set_observer(EngineObserver* observer);
  EngineObserver* observer() const { return listeners_.observer; }
  void record(int64_t chunk, formats::ChunkEventKind kind, int64_t bytes, double seconds = 0);
  // Every chunk's place now (formats::ChunkPlace), for a moment's row.
  std::vector<int8_t> places() const;
  Traffic& traffic() { return traffic_; }
  // A whole-device synchronisation by the engine: host code is about to touch payloads.
  void synchronize();

  // ---- chunks and tensors ----
  // A new chunk at the end, its payloads on `place` (zeroed) unless another rank owns it. `on_nvme`
  // (a movable chunk on the host, or a margin chunk on the device): its optimizer payloads get an
  // NVMe slot instead, and stay staged (zeroed) until the next chunk is made or
  // unstage_optimizer(); its Adam runs on the host (optimizer_place kHost).
  void new_chunk(Residence residence, Place place, bool on_nvme = false);
  // Takes `module`'s own parameters into chunk `k`, the plan's (plan::leaf_chunks): the last chunk,
  // or a new one made through `new_chunk_for`; `on_grad` runs as each one's gradient arrives.
  // `copy_values`: their values are copied in; otherwise the caller writes them into the chunk.
  void add_module(torch::nn::Module& module, const std::string& prefix, Residence residence,
                  int64_t k, const std::function<void(Residence)>& new_chunk_for,
                  const std::function<void(int64_t)>& on_grad, bool copy_values = true);
  void set_state(ManagedTensor& t, TensorState state);

  // ---- views and payloads ----
  torch::Tensor view(const Block& block, c10::ScalarType type, int64_t offset,
                     const std::vector<int64_t>& shape) const;
  torch::Tensor param_view(const ManagedTensor& t) const;
  torch::Tensor master_view(const ManagedTensor& t) const;
  torch::Tensor grad_view(const ManagedTensor& t) const;
  const void* grad_data(const Chunk& c) const;
  optim::GradType grad_type() const;
  // Points every tensor of chunk k at the chunk's current payloads: the parameter's data, and its
  // .grad at the gradient slot so autograd accumulates straight into the chunk.
  void repoint(int64_t k);
  // A payload on `place`, zeroed unless `zeroed` is false (then its owner writes all of it before
  // it is read); `moves`: copies between the places will take it back and forth (Note [pinned
  // what moves]).
  Block allocate_payload(Place place, int64_t bytes, bool moves, bool zeroed = true);
  // Note [reserved blocks]: sets aside the copyable host memory of the compute payloads of the
  // chunks of `sizes` (elements) that will start on the host and move (pinned on the CUDA tier),
  // made at once.
  void reserve_host_compute(const std::vector<int64_t>& sizes);
  // Zeroes the padding of chunk k's parameters and master weights (the elements past `used`), which
  // new_chunk leaves unfilled; once its last leaf has come.
  void zero_padding(int64_t k);
  // Gives remote chunk k compute payloads (to be filled by a gather), or takes them away. With
  // `param_slot` (Note [flat gathers]) its param payload is that slot of its group's flat block,
  // on the side it computes on, which the caller keeps until free_remote(k).
  void allocate_remote(int64_t k, Block param_slot = Block());
  void free_remote(int64_t k);

  // ---- split modules (Note [split modules]) ----
  // Whether group g is a split module's, and its span.
  bool split_group(int64_t g) const { return spans_.count(g) > 0; }
  const Span& span(int64_t g) const { return spans_.at(g); }
  // Gathering group g: the span is allocated, the other ranks' parts are given their slots in it
  // (counted as gathered, as allocate_remote does) and this rank's part is copied into its slot
  // (a queued copy ahead into it must have been awaited: await_upload).
  void open_span(int64_t g);
  // Gives the span back, with the other ranks' slots (as free_remote does); its tensors hold
  // nothing until it opens again.
  void close_span(int64_t g);
  // Part `part`'s slot of open span g: its param payload, or (`grad`, without param/grad reuse)
  // its gradient payload. The slot does not own its memory.
  Block span_slot(int64_t g, int64_t part, bool grad) const;
  // Points the tensors of group g's split module at its span, or at nothing while it is closed.
  void repoint_span(int64_t g);
  OwnedPiece owned_piece(const ManagedTensor& t) const;
  // The block tensor t computes on (its chunk's param payload, or its span's), or null while it
  // has none (a remote chunk between gathers, a closed span).
  const Block* compute_block(const ManagedTensor& t) const;

  // ---- the NVMe tier (Note [nvme tier]) ----
  // Takes the tier; its staging pool counts against the host budget from now on.
  void attach_nvme(std::unique_ptr<NvmeOptimizer> nvme);
  NvmeOptimizer* nvme() const { return nvme_.get(); }
  // The host buffers through which NVMe chunks whose compute payloads stay on the device are
  // updated (Note [nvme tier]): a param payload and, without param/grad reuse, a grad payload.
  void allocate_nvme_compute_buffers();
  Block& nvme_param_buffer() { return nvme_param_; }
  Block& nvme_grad_buffer() { return nvme_grad_; }
  // Host code is about to read (and with `write`, change) chunk k's optimizer payloads through its
  // Blocks: an NVMe chunk is staged into them (the one staged before is given back). No-op for
  // other chunks. Only while no Adam of an NVMe chunk is queued.
  void stage_optimizer(int64_t k, bool write);
  // Gives the staged chunk back (writing it behind when it was changed); its Blocks empty again.
  void unstage_optimizer();

  // ---- moves ----
  // `ahead`: an upload for a later moment, which compute waits for only at its first use
  // (await_upload).
  void move_compute(int64_t k, Place to, bool ahead = false);
  void move_optimizer_state(int64_t k, Place to);
  // Called with k before chunk k's compute payloads move (on the thread that moves them): waits
  // for whatever else still reads or writes them (Note [collectives beside compute]).
  void set_move_guard(std::function<void(int64_t)> guard) {
    listeners_.move_guard = std::move(guard);
  }
  // Compute waits here for a chunk copied ahead (Note [prefetch]).
  void await_upload(int64_t k);

 private:
  void add_bytes(Place place, int64_t bytes);
  void stage(int64_t k, NvmeOptimizer::Use use);
  // add_module for a split module's leaf, its group starting at chunk k (Note [split modules]).
  void add_split_module(torch::nn::Module& module, const std::string& prefix, Residence residence,
                        int64_t k, const std::function<void(Residence)>& new_chunk_for,
                        const std::function<void(int64_t)>& on_grad, bool copy_values);
  // Checks and takes one parameter of `module` as tensor `t` (its chunk and offset set).
  int64_t take_parameter(torch::nn::Module& module, ManagedTensor t,
                         const std::function<void(int64_t)>& on_grad);
  void moved_to(Block& block, Block moved, bool ahead);

  std::unique_ptr<tier::DeviceTier> tier_;
  ChunkFormat format_;
  chunk::Sharding sharding_;
  // Each chunk's planned capacity and part of a split module (Note [split modules]).
  struct Planned {
    std::vector<int64_t> sizes, parts;
  } planned_;
  std::vector<Chunk> chunks_;
  std::vector<ManagedTensor> tensors_;
  std::unordered_map<const torch::nn::Module*, std::vector<int64_t>> module_tensors_;
  std::unordered_map<std::string, int64_t> tensor_by_name_;
  std::unordered_map<int64_t, Span> spans_;  // by group (Note [split modules])
  // The bytes held per place, and of the device's those of the collectives' blocks
  // (add_side_bytes).
  struct Bytes {
    memory::Stat device, host;
    int64_t collective_device = 0;
  } bytes_;
  struct Budgets {
    int64_t device = 0, host = 0;
  } budgets_;
  Traffic traffic_;
  // Who hears of the store's doings: the profile's observer, and the guard a move waits on.
  struct Listeners {
    EngineObserver* observer = nullptr;
    std::function<void(int64_t)> move_guard;
  } listeners_;
  std::unique_ptr<NvmeOptimizer> nvme_;
  Block nvme_param_, nvme_grad_;
  // The NVMe chunk staged for host code (or -1), and whether host code changed it.
  struct Staged {
    int64_t chunk = -1;
    bool dirty = false;
  } staged_;
  core::SetupPhases setup_;
};

}  // namespace pstar::engine
