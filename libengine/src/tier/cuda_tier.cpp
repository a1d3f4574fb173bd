// The CUDA device tier (Note [device tier]; docs/cuda.md, "The CUDA device tier"): kDevice blocks
// from one DeviceArena, kHost blocks from a PinnedHostPool, copies on a side stream ordered with
// LibTorch's current stream by events, and releases deferred until the work queued before them has
// finished. Built only with a CUDA LibTorch and pstar_cuda (libengine/src/tier/sources.cmake).
#include "pstar/core/torch_cuda_compat.h"  // first: it must precede every c10/cuda header

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/cuda/adam.h"
#include "pstar/cuda/device.h"
#include "pstar/cuda/error.h"
#include "pstar/cuda/memory.h"
#include "pstar/cuda/sq_sum.h"
#include "pstar/cuda/stream.h"
#include "pstar/memory/host_pool.h"
#include "pstar/optim/host_adam.h"
#include "pstar/tier/device_tier.h"

#if !PSTAR_HAVE_CUDA_TIER
#error \
    "cuda_tier.cpp is compiled only with PSTAR_HAVE_CUDA_TIER=1 (libengine/src/tier/sources.cmake)"
#endif

namespace pstar::tier {
namespace {

void check(cudaError_t status, const char* operation) {
  if (status != cudaSuccess) cuda::throw_error(static_cast<int>(status), operation);
}

// LibTorch's current stream on `device`: where the model's kernels, and so the tier's own compute,
// run. Looked up on every use, since the caller may switch streams.
cudaStream_t compute_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

// Buffers an operation touches: (start, bytes); null starts are skipped.
using Ranges = std::vector<std::pair<const void*, int64_t>>;

// The memory a queued copy reads or writes on the side concerned.
struct CopySpan {
  uintptr_t begin = 0, end = 0;

  bool overlaps(const void* p, int64_t bytes) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return p != nullptr && a < end && begin < a + static_cast<uintptr_t>(bytes);
  }
};

// A queued copy that the compute stream may have to wait for: `done` is recorded on the copy
// stream right after it.
struct PendingCopy : CopySpan {
  cuda::Event done;
};

// A queued copy that the host may have to wait for. Its event is shared: a thread waits for it
// outside the tier's lock (host Adam on a worker thread, Note [device tier] Threads), and it goes
// back to the spares only once nobody holds it.
struct HostCopy : CopySpan {
  std::shared_ptr<cuda::Event> done;
};

// The streams a tier's work runs on, besides LibTorch's compute stream: one per copy direction,
// so that an eviction and an upload run at once (the H100 machines move 55 GB/s one way and 88 GB/s
// both ways at once).
enum CopyStream : int { kUploads = 0, kEvictions = 1, kCopyStreams = 2 };

// Marks recorded on every stream a block's memory may still be used on, at its release.
struct AfterAll {
  cuda::Event copies[kCopyStreams];
  cuda::Event compute;

  bool query() const { return copies[0].query() && copies[1].query() && compute.query(); }
  void synchronize() const {
    for (const cuda::Event& e : copies) e.synchronize();
    compute.synchronize();
  }
};

// A released block, kept until the work queued on every stream before its release has finished.
struct Retired {
  cuda::DeviceBlock device_block;
  cuda::PinnedBlock host_block;
  memory::HostBlock pageable_block;  // Note [pinned what moves]
  AfterAll after;
};

// Device memory handed back to the arena before the work queued before its release finished
// (Note [stream-ordered reuse]): whoever allocates it makes every stream wait for `after` first.
struct Unsettled : CopySpan {
  AfterAll after;
};

// What blocks need after the tier object is gone (they may outlive it): the memory, the copy
// stream and the retire list. Owned by the tier and by every block.
struct CudaTierState {
  CudaTierState(int device_index, int64_t arena_bytes) : device(device_index), arena(arena_bytes) {}

  ~CudaTierState() {
    // Every block and the tier are gone; wait for what still uses retired memory before the arena
    // and the pool free it. Errors are ignored: at process exit the runtime may be gone already.
    try {
      const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
      for (const Retired& r : retired) r.after.synchronize();
      for (const Unsettled& u : unsettled) u.after.synchronize();
      for (cuda::Stream& stream : copies) stream.synchronize();
    } catch (...) {
    }
  }

  CudaTierState(const CudaTierState&) = delete;
  CudaTierState& operator=(const CudaTierState&) = delete;

  // Made current by the caller before construction: the arena, the stream and the events belong to
  // the device current then.
  const int device;
  cuda::DeviceArena arena;
  cuda::PinnedHostPool pinned;
  memory::HostPool pageable;  // host blocks no copy touches in steady state
  cuda::Stream copies[kCopyStreams];

  std::mutex mutex;  // guards everything below
  // Re-recorded for every copy: the compute queued before it, the copy itself.
  cuda::Event compute_mark{false};
  cuda::Event copy_mark{false};
  // Copies that read or write host memory, per copy stream in queue order, until the host has
  // waited for them: a host operation waits only for those that touch its buffers, so host Adam on
  // one chunk runs while the copies of the chunks after it are still under way.
  std::vector<HostCopy> host_copies[kCopyStreams];
  // Copies ahead into device memory that the compute stream has not been made to wait for yet.
  std::vector<PendingCopy> ahead;
  std::vector<Retired> retired;
  std::vector<Unsettled> unsettled;
  std::vector<cuda::Event> spare_events;  // creating an event is a driver call: reuse them

  cuda::Event take_event_locked() {
    if (spare_events.empty()) return cuda::Event(false);
    cuda::Event event = std::move(spare_events.back());
    spare_events.pop_back();
    return event;
  }

  void recycle_locked(AfterAll& after) {
    for (cuda::Event& e : after.copies) spare_events.push_back(std::move(e));
    spare_events.push_back(std::move(after.compute));
  }

  AfterAll mark_all_locked() {
    AfterAll after{{take_event_locked(), take_event_locked()}, take_event_locked()};
    for (int i = 0; i < kCopyStreams; ++i) after.copies[i].record(copies[i]);
    check(cudaEventRecord(after.compute.native(), compute_stream(device)),
          "cudaEventRecord on the compute stream");
    return after;
  }

  // Frees the retired blocks whose work has finished, and forgets the unsettled ranges whose work
  // has.
  void reap_locked() {
    std::vector<Retired> pending;
    for (Retired& r : retired) {
      if (r.after.query()) {
        r.device_block.reset();
        r.host_block.reset();
        r.pageable_block.reset();
        recycle_locked(r.after);
      } else {
        pending.push_back(std::move(r));
      }
    }
    retired.swap(pending);
    std::vector<Unsettled> still;
    for (Unsettled& u : unsettled) {
      if (u.after.query())
        recycle_locked(u.after);
      else
        still.push_back(std::move(u));
    }
    unsettled.swap(still);
  }

  // Note [stream-ordered reuse]
  // At steady state the chunk payloads fill the arena to within a block, so an upload needs the
  // memory of the block just evicted, whose copy to the host is still queued behind compute.
  // Waiting for it on the host would stall the thread that queues kernels (and, through
  // synchronize(), the whole device) once per upload. Instead the retired device blocks go back to
  // the arena at once, oldest first, until the request fits; their ranges stay "unsettled" until
  // their work finishes, and a block allocated over one makes every stream wait for that work on
  // the device, which is what the host would have waited for, without blocking it. Returns whether
  // anything was handed back.
  bool settle_in_stream_order_locked() {
    bool any = false;
    std::vector<Retired> keep;
    for (Retired& r : retired) {
      // Pinned memory cannot be handed over on the device: it waits for its events. (A retired
      // block holds one side only: see the owners below.)
      if (!r.device_block) {
        keep.push_back(std::move(r));
        continue;
      }
      unsettled.push_back(
          Unsettled{span_of(r.device_block.data(), r.device_block.bytes()), std::move(r.after)});
      r.device_block.reset();
      any = true;
    }
    retired.swap(keep);
    return any;
  }

  // Orders every stream after the work on the unsettled memory inside [p, p + bytes).
  void wait_unsettled_locked(const void* p, int64_t bytes) {
    for (const Unsettled& u : unsettled) {
      if (!u.overlaps(p, bytes)) continue;
      const cudaStream_t streams[] = {compute_stream(device), copies[kUploads].native(),
                                      copies[kEvictions].native()};
      for (cudaStream_t stream : streams) {
        for (const cuda::Event& e : u.after.copies)
          check(cudaStreamWaitEvent(stream, e.native(), 0), "cudaStreamWaitEvent on reused memory");
        check(cudaStreamWaitEvent(stream, u.after.compute.native(), 0),
              "cudaStreamWaitEvent on reused memory");
      }
    }
  }

  static CopySpan span_of(const void* p, int64_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return CopySpan{a, a + static_cast<uintptr_t>(bytes)};
  }

  // Records that a copy ahead queued on the upload stream just now writes [p, p + bytes).
  void note_ahead_locked(const void* p, int64_t bytes) {
    PendingCopy pending{span_of(p, bytes), take_event_locked()};
    pending.done.record(copies[kUploads]);
    ahead.push_back(std::move(pending));
  }

  // Records that a copy queued on copy stream `s` just now reads or writes host [p, p + bytes).
  void note_host_copy_locked(int s, const void* p, int64_t bytes) {
    HostCopy pending{span_of(p, bytes), std::make_shared<cuda::Event>(take_event_locked())};
    pending.done->record(copies[s]);
    host_copies[s].push_back(std::move(pending));
  }

  // An event back to the spares, unless a waiting thread still holds it (it is freed with the
  // last holder then).
  void recycle_locked(std::shared_ptr<cuda::Event> event) {
    if (event.use_count() == 1) spare_events.push_back(std::move(*event));
  }

  // The host may read or write host memory only once the copies queued from or into it are done.
  // Each copy stream runs in order, so waiting for the last copy on it touching any of `ranges`
  // (pointer, bytes; null pointers are skipped) completes every copy queued on it before that one
  // too. The waits are outside the lock, so that other threads queue copies meanwhile.
  void wait_host(const Ranges& ranges) {
    for (int s = 0; s < kCopyStreams; ++s) {
      std::shared_ptr<cuda::Event> last;
      {
        const std::lock_guard<std::mutex> lock(mutex);
        for (const HostCopy& pending : host_copies[s])
          for (const auto& [p, bytes] : ranges)
            if (pending.overlaps(p, bytes)) last = pending.done;
        if (!last) continue;
      }
      last->synchronize();
      const std::lock_guard<std::mutex> lock(mutex);
      std::vector<HostCopy>& list = host_copies[s];
      // Another thread (or synchronize()) may have retired it and those before it meanwhile.
      const auto it = std::find_if(list.begin(), list.end(),
                                   [&](const HostCopy& pending) { return pending.done == last; });
      if (it == list.end()) continue;
      std::vector<HostCopy> finished(std::make_move_iterator(list.begin()),
                                     std::make_move_iterator(it + 1));
      list.erase(list.begin(), it + 1);
      last.reset();
      for (HostCopy& pending : finished) recycle_locked(std::move(pending.done));
    }
  }

  // Makes `stream` wait for the copies ahead into [p, p + bytes), on the device.
  void await_ahead_locked(const void* p, int64_t bytes, cudaStream_t stream) {
    std::vector<PendingCopy> keep;
    for (PendingCopy& pending : ahead) {
      if (pending.overlaps(p, bytes)) {
        check(cudaStreamWaitEvent(stream, pending.done.native(), 0),
              "cudaStreamWaitEvent of the compute stream on a copy ahead");
        spare_events.push_back(std::move(pending.done));
      } else {
        keep.push_back(std::move(pending));
      }
    }
    ahead.swap(keep);
  }

  // Everything queued has finished: no copy is pending any more.
  void forget_pending_locked() {
    for (PendingCopy& pending : ahead) spare_events.push_back(std::move(pending.done));
    ahead.clear();
    for (std::vector<HostCopy>& list : host_copies) {
      for (HostCopy& pending : list) recycle_locked(std::move(pending.done));
      list.clear();
    }
  }

  // From a block's owner: the memory goes back to the arena or a pool only once every stream has
  // passed this point.
  void retire(cuda::DeviceBlock device_block, cuda::PinnedBlock host_block,
              memory::HostBlock pageable_block = memory::HostBlock()) noexcept {
    try {
      const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
      const std::lock_guard<std::mutex> lock(mutex);
      // A copy ahead into a released block has nothing left to order: its reuse waits for the
      // events below.
      if (device_block) {
        std::vector<PendingCopy> keep;
        for (PendingCopy& pending : ahead) {
          if (pending.overlaps(device_block.data(), 1))
            spare_events.push_back(std::move(pending.done));
          else
            keep.push_back(std::move(pending));
        }
        ahead.swap(keep);
      }
      retired.push_back(Retired{std::move(device_block), std::move(host_block),
                                std::move(pageable_block), mark_all_locked()});
    } catch (...) {
      // CUDA failed (a broken context, or the runtime unloading at exit): no queued work can be
      // waited for any more, so the memory is freed now, by the blocks' destructors.
    }
  }
};

class DeviceOwner final : public Block::Owner {
 public:
  DeviceOwner(std::shared_ptr<CudaTierState> state, cuda::DeviceBlock block)
      : state_(std::move(state)), block_(std::move(block)) {}
  ~DeviceOwner() override { state_->retire(std::move(block_), cuda::PinnedBlock()); }

 private:
  std::shared_ptr<CudaTierState> state_;
  cuda::DeviceBlock block_;
};

class PinnedOwner final : public Block::Owner {
 public:
  PinnedOwner(std::shared_ptr<CudaTierState> state, cuda::PinnedBlock block)
      : state_(std::move(state)), block_(std::move(block)) {}
  ~PinnedOwner() override { state_->retire(cuda::DeviceBlock(), std::move(block_)); }

 private:
  std::shared_ptr<CudaTierState> state_;
  cuda::PinnedBlock block_;
};

// Note [pinned what moves]: a host block that no copy touches in steady state, in pageable memory.
class PageableOwner final : public Block::Owner {
 public:
  PageableOwner(std::shared_ptr<CudaTierState> state, memory::HostBlock block)
      : state_(std::move(state)), block_(std::move(block)) {}
  ~PageableOwner() override {
    state_->retire(cuda::DeviceBlock(), cuda::PinnedBlock(), std::move(block_));
  }

 private:
  std::shared_ptr<CudaTierState> state_;
  memory::HostBlock block_;
};

class CudaTier final : public DeviceTier {
 public:
  CudaTier(int device, int64_t arena_bytes, int64_t context_bytes, std::string description)
      : description_(std::move(description)), context_bytes_(context_bytes) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    state_ = std::make_shared<CudaTierState>(device, arena_bytes);
  }

  std::string describe() const override { return description_; }
  c10::Device compute_device() const override {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(state_->device));
  }
  c10::Device device_of(Side side) const override {
    switch (side) {
      case Side::kDevice:
        return compute_device();
      case Side::kHost:
        return c10::Device(c10::kCPU);
    }
    PSTAR_INTERNAL_ASSERT(false, "unknown side ", static_cast<int>(side));
  }
  int64_t device_capacity_bytes() const override { return state_->arena.capacity_bytes(); }

  Block allocate(Side side, int64_t bytes) override {
    Block block = allocate_uninitialized(side, bytes);
    if (side == Side::kDevice) {
      const c10::cuda::CUDAGuard guard(device_index());
      // On the compute stream, so later compute and copies (which wait for it) see zeros.
      check(cudaMemsetAsync(block.data(), 0, static_cast<size_t>(bytes), compute()),
            "cudaMemsetAsync zeroing a new device block");
    } else {
      // No copy can still touch it: a pinned block is reused only after its retirement.
      std::memset(block.data(), 0, static_cast<size_t>(bytes));
    }
    return block;
  }

  Block allocate_uninitialized(Side side, int64_t bytes) override {
    PSTAR_INTERNAL_ASSERT(bytes > 0, "allocate(", side_name(side), ", ", bytes, ")");
    const c10::cuda::CUDAGuard guard(device_index());
    switch (side) {
      case Side::kDevice: {
        cuda::DeviceBlock block = allocate_device(bytes);
        void* data = block.data();
        return Block(data, bytes, side, std::make_unique<DeviceOwner>(state_, std::move(block)));
      }
      case Side::kHost: {
        cuda::PinnedBlock block = allocate_host(bytes);
        void* data = block.data();
        return Block(data, bytes, side, std::make_unique<PinnedOwner>(state_, std::move(block)));
      }
    }
    PSTAR_INTERNAL_ASSERT(false, "unknown side ", static_cast<int>(side));
  }

  // A pageable block is reused only after its retirement too, so nothing can still touch it.
  Block allocate_host_only(int64_t bytes) override {
    PSTAR_INTERNAL_ASSERT(bytes > 0, "allocate_host_only(", bytes, ")");
    reap();
    memory::HostBlock block = state_->pageable.acquire(bytes);
    std::memset(block.data(), 0, static_cast<size_t>(bytes));
    void* data = block.data();
    return Block(data, bytes, Side::kHost,
                 std::make_unique<PageableOwner>(state_, std::move(block)));
  }

  void copy(Block& dst, const Block& src, int64_t bytes) override {
    queue_copy(dst, src, bytes, /*ahead=*/false);
  }

  void copy_ahead(Block& dst, const Block& src, int64_t bytes) override {
    PSTAR_INTERNAL_ASSERT(dst.side() == Side::kDevice, "a copy ahead into ", side_name(dst.side()),
                          " memory");
    queue_copy(dst, src, bytes, /*ahead=*/true);
  }

  void await_copies(const Block& block) override {
    if (!block) return;
    const c10::cuda::CUDAGuard guard(device_index());
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->await_ahead_locked(block.data(), block.bytes(), compute());
  }

  void zero(Block& block, int64_t bytes) override {
    PSTAR_INTERNAL_ASSERT(block && bytes >= 0 && bytes <= block.bytes(), "zero of ", bytes,
                          " bytes of a block of ", block.bytes());
    if (bytes == 0) return;
    switch (block.side()) {
      case Side::kDevice: {
        const c10::cuda::CUDAGuard guard(device_index());
        await_ahead({{block.data(), bytes}});
        check(cudaMemsetAsync(block.data(), 0, static_cast<size_t>(bytes), compute()),
              "cudaMemsetAsync zeroing a device block");
        return;
      }
      case Side::kHost:
        state_->wait_host({{block.data(), bytes}});
        std::memset(block.data(), 0, static_cast<size_t>(bytes));
        return;
    }
  }

  void adam_step(Side side, const optim::AdamHyper& hyper, float grad_multiplier,
                 const optim::AdamSpan& span) override {
    switch (side) {
      case Side::kDevice: {
        cuda::AdamSpanDevice device_span;
        device_span.master = span.master;
        device_span.exp_avg = span.exp_avg;
        device_span.exp_avg_sq = span.exp_avg_sq;
        device_span.grad = span.grad;
        device_span.grad_type = span.grad_type;
        device_span.param_out = span.param_out;
        device_span.param_out_type = span.param_out_type;
        device_span.numel = span.numel;
        const c10::cuda::CUDAGuard guard(device_index());
        await_ahead(adam_ranges(span));
        cuda::adam_step(device_span, hyper, grad_multiplier, compute());
        return;
      }
      case Side::kHost:
        state_->wait_host(adam_ranges(span));
        optim::host_adam_step(hyper, grad_multiplier, span);
        return;
    }
  }

  double grad_sq_sum(Side side, const void* grad, optim::GradType grad_type,
                     int64_t numel) override {
    switch (side) {
      case Side::kDevice: {
        const c10::cuda::CUDAGuard guard(device_index());
        await_ahead({{grad, numel * grad_bytes(grad_type)}});
        return cuda::grad_sq_sum(grad, grad_type, numel, compute());
      }
      case Side::kHost:
        state_->wait_host({{grad, numel * grad_bytes(grad_type)}});
        return optim::grad_sq_sum(grad, grad_type, numel);
    }
    PSTAR_INTERNAL_ASSERT(false, "unknown side ", static_cast<int>(side));
  }

  // The device side's sums: all queued, then one wait (a wait per chunk would drain the compute
  // stream once per margin chunk at every step).
  void grad_sq_sums(Side side, const std::vector<GradRef>& grads, double* out) override {
    if (side == Side::kHost) {
      DeviceTier::grad_sq_sums(side, grads, out);
      return;
    }
    const c10::cuda::CUDAGuard guard(device_index());
    Ranges ranges;
    std::vector<cuda::SqSumJob> jobs;
    for (const GradRef& g : grads) {
      ranges.emplace_back(g.grad, g.numel * grad_bytes(g.grad_type));
      jobs.push_back(cuda::SqSumJob{g.grad, g.grad_type, g.numel});
    }
    await_ahead(ranges);
    cuda::grad_sq_sums(jobs.data(), static_cast<int64_t>(jobs.size()), out, compute());
  }

  // Note [device footprint].
  Footprint footprint() override {
    return Footprint{state_->arena.capacity_bytes(), cuda::sq_sum_scratch_bytes(), context_bytes_};
  }
  int64_t non_model_reserved_peak_bytes() override {
    return compat::cuda_reserved_bytes(state_->device).peak;
  }
  int64_t own_synchronizations() const override { return own_syncs_.load(); }

  // The arena is one cudaMalloc outside LibTorch, so LibTorch's own allocations are the non-model
  // memory.
  int64_t non_model_bytes() override {
    return compat::cuda_allocated_bytes(state_->device).current;
  }
  int64_t non_model_peak_bytes() override {
    return compat::cuda_allocated_bytes(state_->device).peak;
  }
  int64_t reset_non_model_peak() override {
    const int64_t peak = compat::cuda_allocated_bytes(state_->device).peak;
    compat::reset_cuda_allocated_peak(state_->device);
    return peak;
  }

  void synchronize() override {
    const c10::cuda::CUDAGuard guard(device_index());
    check(cudaStreamSynchronize(compute()), "cudaStreamSynchronize of the compute stream");
    const std::lock_guard<std::mutex> lock(state_->mutex);
    for (cuda::Stream& stream : state_->copies) stream.synchronize();
    state_->forget_pending_locked();
    state_->reap_locked();
  }

  HostMemory host_memory() const override {
    return HostMemory{state_->pinned.stats().reserved, state_->pageable.stats().reserved};
  }

  // Released blocks reach their pool only after their work: wait for all of it, then free.
  int64_t trim() override {
    ++own_syncs_;  // the engine trims once its plan is made, not at steady state
    synchronize();
    return state_->pinned.release_free() + state_->pageable.release_free();
  }

 private:
  c10::DeviceIndex device_index() const { return static_cast<c10::DeviceIndex>(state_->device); }
  cudaStream_t compute() const { return compute_stream(state_->device); }

  void reap() {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->reap_locked();
  }

  static int64_t grad_bytes(optim::GradType type) { return type == optim::GradType::kF32 ? 4 : 2; }

  // The buffers one Adam pass reads and writes.
  static Ranges adam_ranges(const optim::AdamSpan& span) {
    const int64_t n = span.numel;
    return {{span.master, n * 4},
            {span.exp_avg, n * 4},
            {span.exp_avg_sq, n * 4},
            {span.grad, n * grad_bytes(span.grad_type)},
            {span.param_out, n * 2}};
  }

  // Makes the compute stream wait for the copies ahead into any of `ranges`.
  void await_ahead(const Ranges& ranges) {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    for (const auto& [p, bytes] : ranges)
      if (p != nullptr) state_->await_ahead_locked(p, bytes, compute());
  }

  // A copy on the copy stream after the compute queued so far, which may still write src or read
  // dst. Into device memory, the compute queued later may read dst: unless the copy is `ahead`,
  // the compute stream waits for it on the device (the host does not block); a copy ahead leaves
  // that wait to await_copies(). An eviction (into host memory) holds compute back for nothing: the
  // host waits for it before touching dst, and src is reused only after its deferred release.
  void queue_copy(Block& dst, const Block& src, int64_t bytes, bool ahead) {
    PSTAR_INTERNAL_ASSERT(dst && src, "copy between empty blocks");
    PSTAR_INTERNAL_ASSERT(bytes >= 0 && bytes <= dst.bytes() && bytes <= src.bytes(), "copy of ",
                          bytes, " bytes from a block of ", src.bytes(), " into one of ",
                          dst.bytes());
    if (bytes == 0) return;
    const bool dst_host = dst.side() == Side::kHost;
    const bool src_host = src.side() == Side::kHost;
    if (dst_host && src_host) {
      state_->wait_host({{dst.data(), bytes}, {src.data(), bytes}});
      std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
      return;
    }
    const c10::cuda::CUDAGuard guard(device_index());
    const cudaStream_t compute_now = compute();
    CudaTierState& s = *state_;
    const std::lock_guard<std::mutex> lock(s.mutex);
    // Evictions on their own stream, everything that writes device memory on the uploads'.
    const int which = dst_host ? kEvictions : kUploads;
    cuda::Stream& stream = s.copies[which];
    check(cudaEventRecord(s.compute_mark.native(), compute_now),
          "cudaEventRecord on the compute stream");
    s.compute_mark.wait(stream);
    if (dst_host) {
      cuda::copy_d2h_async(dst.data(), src.data(), bytes, stream);
    } else if (src_host) {
      cuda::copy_h2d_async(dst.data(), src.data(), bytes, stream);
    } else {
      cuda::copy_d2d_async(dst.data(), src.data(), bytes, stream);
    }
    if (!dst_host) {
      if (ahead) {
        s.note_ahead_locked(dst.data(), bytes);
      } else {
        s.copy_mark.record(stream);
        check(cudaStreamWaitEvent(compute_now, s.copy_mark.native(), 0),
              "cudaStreamWaitEvent of the compute stream on a copy");
      }
    }
    if (dst_host) s.note_host_copy_locked(which, dst.data(), bytes);
    if (src_host) s.note_host_copy_locked(which, src.data(), bytes);
  }

  // Memory still waiting in the retire list may be all that is missing: on failure, wait for the
  // queued work, free what it held, and try once more.
  cuda::DeviceBlock allocate_device(int64_t bytes) {
    {
      CudaTierState& s = *state_;
      const std::lock_guard<std::mutex> lock(s.mutex);
      s.reap_locked();
      // Note [stream-ordered reuse]: first the arena as it is, then with the retired blocks handed
      // back in stream order; only then a full synchronisation.
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          cuda::DeviceBlock block = s.arena.allocate(bytes);
          s.wait_unsettled_locked(block.data(), bytes);
          return block;
        } catch (const OutOfMemoryError&) {
        }
        if (attempt == 0 && !s.settle_in_stream_order_locked()) break;
      }
    }
    ++own_syncs_;
    synchronize();
    try {
      return state_->arena.allocate(bytes);
    } catch (const OutOfMemoryError& e) {
      PSTAR_THROW(OutOfMemoryError, "the CUDA tier's device side: ", e.what());
    }
  }

  cuda::PinnedBlock allocate_host(int64_t bytes) {
    reap();
    try {
      return state_->pinned.acquire(bytes);
    } catch (const OutOfMemoryError&) {
    }
    ++own_syncs_;
    synchronize();
    // Free blocks of other sizes hold pinned memory that this size cannot use.
    state_->pinned.release_free();
    try {
      return state_->pinned.acquire(bytes);
    } catch (const OutOfMemoryError& e) {
      PSTAR_THROW(OutOfMemoryError, "the CUDA tier's host side: ", e.what());
    }
  }

  std::shared_ptr<CudaTierState> state_;
  std::string description_;
  const int64_t context_bytes_;
  std::atomic<int64_t> own_syncs_{0};  // allocate_device/allocate_host's last resort
};

}  // namespace

bool cuda_tier_built() { return true; }

int64_t cuda_free_bytes(int device_index) {
  const int devices = cuda::device_count();
  PSTAR_CHECK(device_index >= 0 && device_index < devices, ConfigError, "CUDA device ",
              device_index, " does not exist (", devices, " found",
              devices == 0 ? str_cat(": ", cuda::no_device_reason()) : std::string(),
              "); train with --device cpu");
  return cuda::memory_info(device_index).free_bytes;
}

std::unique_ptr<DeviceTier> make_cuda_tier(int device_index, int64_t arena_bytes) {
  const int devices = cuda::device_count();
  PSTAR_CHECK(devices > 0, ConfigError, "the CUDA device tier needs a CUDA device and found none (",
              cuda::no_device_reason(), "); train with --device cpu");
  PSTAR_CHECK(
      device_index >= 0 && device_index < devices, ConfigError, "CUDA device ", device_index,
      " does not exist: this machine has ", devices,
      devices == 1 ? " device (cuda:0)" : str_cat(" devices (cuda:0 to cuda:", devices - 1, ")"));
  PSTAR_CHECK(arena_bytes > 0, ConfigError,
              "the CUDA tier's arena for chunk payloads must be larger than 0 bytes, got ",
              arena_bytes, "; raise engine.device_memory");
  PSTAR_CHECK(at::hasCUDA(), ConfigError,
              "the LibTorch loaded in this process has no CUDA support (libtorch_cuda is not "
              "loaded), although pstar was built against a CUDA LibTorch; run with the LibTorch it "
              "was built with");
  try {
    // Before measuring free memory: it creates the device's context and LibTorch's allocator.
    compat::lazy_init_cuda();
  } catch (const c10::Error& e) {
    PSTAR_THROW(ConfigError, "LibTorch could not initialize CUDA: ", e.what_without_backtrace());
  }
  const cuda::MemoryInfo memory = cuda::memory_info(device_index);
  PSTAR_CHECK(arena_bytes <= memory.free_bytes, OutOfMemoryError, "the CUDA tier's arena of ",
              format_bytes(arena_bytes), " (", arena_bytes, " bytes) does not fit on CUDA device ",
              device_index, ", which has ", format_bytes(memory.free_bytes), " (",
              memory.free_bytes, " bytes) free of ", format_bytes(memory.total_bytes),
              "; lower engine.device_memory");
  const cuda::DeviceInfo info = cuda::device_info(device_index);
  std::string description =
      str_cat("CUDA device ", device_index, " (", info.name, ", ",
              format_bytes(info.total_memory_bytes), "), arena ", format_bytes(arena_bytes));
  try {
    // What the device holds before the arena: the context LibTorch just made, its libraries'
    // workspaces, and any other process on the device (Note [device footprint]).
    const int64_t context_bytes = memory.total_bytes - memory.free_bytes;
    return std::make_unique<CudaTier>(device_index, arena_bytes, context_bytes,
                                      std::move(description));
  } catch (const OutOfMemoryError& e) {
    // Free memory is not all allocatable (fragmentation, another process allocating meanwhile).
    PSTAR_THROW(OutOfMemoryError, e.what(), "; lower engine.device_memory");
  }
}

}  // namespace pstar::tier
