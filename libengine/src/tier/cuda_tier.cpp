// The CUDA device tier (Note [device tier]; docs/cuda.md, "The CUDA device tier"): kDevice blocks
// from one DeviceArena, kHost blocks from a PinnedHostPool, copies on a side stream ordered with
// LibTorch's current stream by events, and releases deferred until the work queued before them has
// finished. This file is the DeviceTier: allocation, copies, the kernels and the entry points;
// the streams, the pending copies and the deferred release are in cuda_tier_state.{h,cpp}. Built
// only with a CUDA LibTorch and pstar_cuda (libengine/src/tier/sources.cmake).
#include "cuda_tier_state.h"  // first: it includes torch_cuda_compat.h before any c10/cuda header

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/parallel_fill.h"
#include "pstar/cuda/adam.h"
#include "pstar/cuda/device.h"
#include "pstar/cuda/sq_sum.h"
#include "pstar/optim/host_adam.h"
#include "pstar/tier/device_tier.h"

namespace pstar::tier {
namespace {

using namespace cuda_impl;  // NOLINT(google-build-using-namespace): the tier's own private parts

// A block's device or pinned memory, retired to the state (released once its work is done).
class BlockOwner final : public Block::Owner {
 public:
  BlockOwner(std::shared_ptr<CudaTierState> state, cuda::DeviceBlock device,
             cuda::PinnedBlock pinned)
      : state_(std::move(state)), device_(std::move(device)), pinned_(std::move(pinned)) {}
  ~BlockOwner() override { state_->retire(std::move(device_), std::move(pinned_)); }

 private:
  std::shared_ptr<CudaTierState> state_;
  cuda::DeviceBlock device_;
  cuda::PinnedBlock pinned_;
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

// Note [communication stream]: the compute stream's work up to the moment of the mark. Its event
// goes back to the spares with it: a wait already queued on it keeps what it waits for.
struct ComputeMark final : StreamMark {
  ComputeMark(std::shared_ptr<CudaTierState> s, cuda::Event e)
      : state(std::move(s)), event(std::move(e)) {}
  ~ComputeMark() override {
    const std::lock_guard<std::mutex> lock(state->mutex);
    state->spare_events.push_back(std::move(event));
  }
  ComputeMark(const ComputeMark&) = delete;
  ComputeMark& operator=(const ComputeMark&) = delete;

  std::shared_ptr<CudaTierState> state;
  cuda::Event event;
};

// Note [communication stream]: the tier's communication stream as this thread's current one.
class CommScope final : public CommStreamScope {
 public:
  CommScope(std::shared_ptr<CudaTierState> state, c10::cuda::CUDAStream stream)
      : state_(std::move(state)), guard_(stream) {}
  ~CommScope() override = default;  // gives the thread its stream back
  CommScope(const CommScope&) = delete;
  CommScope& operator=(const CommScope&) = delete;

  void finish() override { state_->communication.synchronize(); }

 private:
  std::shared_ptr<CudaTierState> state_;
  c10::cuda::CUDAStreamGuard guard_;
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
  bool host_addresses_device() const override { return false; }

  Block allocate(Side side, int64_t bytes) override {
    Block block = allocate_uninitialized(side, bytes);
    if (side == Side::kDevice) {
      const c10::cuda::CUDAGuard guard(device_index());
      // On the compute stream, so later compute and copies (which wait for it) see zeros.
      check(cudaMemsetAsync(block.data(), 0, static_cast<size_t>(bytes), compute()),
            "cudaMemsetAsync zeroing a new device block");
    } else {
      // No copy can still touch it: a pinned block is reused only after its retirement.
      core::parallel_zero(block.data(), bytes);  // Note [parallel first touch]
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
        return Block(data, bytes, side,
                     std::make_unique<BlockOwner>(state_, std::move(block), cuda::PinnedBlock()));
      }
      case Side::kHost: {
        cuda::PinnedBlock block = allocate_host(bytes);
        void* data = block.data();
        return Block(data, bytes, side,
                     std::make_unique<BlockOwner>(state_, cuda::DeviceBlock(), std::move(block)));
      }
    }
    PSTAR_INTERNAL_ASSERT(false, "unknown side ", static_cast<int>(side));
  }

  // A pageable block is reused only after its retirement too, so nothing can still touch it.
  Block allocate_host_only(int64_t bytes) override {
    bool untouched = false;
    Block block = allocate_pageable(bytes, &untouched);
    // Note [parallel first touch]; mapped memory (Note [untouched blocks]).
    core::parallel_zero_new(block.data(), bytes, untouched);
    return block;
  }

  // Note [reserved blocks]: cudaHostAlloc on several threads, each on this tier's device.
  void reserve_host(int64_t bytes, int64_t count) override {
    const auto device = device_index();
    try {
      state_->pinned.reserve(bytes, count, memory::reserve_threads(),
                             [device](const std::function<void()>& work) {
                               const c10::cuda::CUDAGuard guard(device);
                               work();
                             });
    } catch (const OutOfMemoryError& e) {
      PSTAR_THROW(OutOfMemoryError, "the CUDA tier's host side: ", e.what());
    }
  }

  Block allocate_unfilled(Side side, int64_t bytes, bool host_only) override {
    PSTAR_INTERNAL_ASSERT(!host_only || side == Side::kHost, "a host-only block on the device");
    return host_only ? allocate_pageable(bytes) : allocate_uninitialized(side, bytes);
  }

  // A pageable block, reused only after its retirement (so nothing can still touch it), unzeroed.
  // `untouched`, when given, says whether it is fresh from the mapping (Note [untouched blocks]).
  Block allocate_pageable(int64_t bytes, bool* untouched = nullptr) {
    PSTAR_INTERNAL_ASSERT(bytes > 0, "allocate_host_only(", bytes, ")");
    reap();
    memory::HostBlock block = state_->pageable.acquire(bytes);
    if (untouched != nullptr) *untouched = block.untouched();
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

  void adam_hold(Side side, const optim::AdamSpan& span) override {
    const c10::cuda::CUDAGuard guard(device_index());
    side == Side::kDevice ? await_ahead(adam_ranges(span)) : state_->wait_host(adam_ranges(span));
    DeviceTier::adam_hold(side, span);  // the device side's: LibTorch on compute(), the current
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

  std::shared_ptr<const StreamMark> mark_compute() override {
    if (!comm_stream_) return nullptr;
    const c10::cuda::CUDAGuard guard(device_index());
    cuda::Event event = [&] {
      const std::lock_guard<std::mutex> lock(state_->mutex);
      return state_->take_event_locked();
    }();
    check(cudaEventRecord(event.native(), compute()), "cudaEventRecord of a compute mark");
    return std::make_shared<ComputeMark>(state_, std::move(event));
  }

  std::unique_ptr<CommStreamScope> enter_comm_stream(const StreamMark* after) override {
    if (!comm_stream_) return nullptr;
    const c10::cuda::CUDAGuard guard(device_index());
    cuda::Stream& stream = state_->communication;
    if (after != nullptr) {
      const auto* mark = dynamic_cast<const ComputeMark*>(after);
      PSTAR_INTERNAL_ASSERT(mark != nullptr, "a stream mark of another tier");
      mark->event.wait(stream);
    }
    return std::make_unique<CommScope>(
        state_, c10::cuda::getStreamFromExternal(stream.native(), device_index()));
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
  // Note [communication stream]: PSTAR_COMM_STREAM=0 leaves the other thread's work on its
  // current stream (LibTorch's default, the compute stream). Checked as PSTAR_ONEDNN is, so that
  // a misspelt value is not taken for "on".
  const bool comm_stream_ = [] {
    const char* v = std::getenv("PSTAR_COMM_STREAM");
    if (v == nullptr) return true;
    const std::string value = v;
    PSTAR_CHECK(value == "0" || value == "1", ConfigError, "PSTAR_COMM_STREAM=", value,
                ": expected 0 (collectives on the compute stream) or 1 (on a stream of their "
                "own, the default)");
    return value == "1";
  }();
};

}  // namespace

bool cuda_tier_built() { return true; }

namespace {

// A device the queries below may ask about; ConfigError naming what this machine has otherwise.
void check_device_exists(int device_index) {
  const int devices = cuda::device_count();
  PSTAR_CHECK(device_index >= 0 && device_index < devices, ConfigError, "CUDA device ",
              device_index, " does not exist (", devices, " found",
              devices == 0 ? str_cat(": ", cuda::no_device_reason()) : std::string(),
              "); train with --device cpu");
}

}  // namespace

int64_t cuda_free_bytes(int device_index) {
  check_device_exists(device_index);
  return cuda::memory_info(device_index).free_bytes;
}

std::string cuda_pci_bus_id(int device_index) {
  check_device_exists(device_index);
  return cuda::device_info(device_index).pci_bus_id;
}

int64_t cuda_library_workspace_bytes(int device_index, c10::ScalarType dtype) {
  check_device_exists(device_index);
  try {
    compat::lazy_init_cuda();
    const auto index = static_cast<c10::DeviceIndex>(device_index);
    const c10::cuda::CUDAGuard guard(index);
    {
      // Note [library workspaces]: both kinds of product, and a backward, which runs on autograd's
      // device thread with that thread's own handle.
      const at::AutoGradMode grad_mode(true);  // whatever the caller's mode: the backward must run
      const auto options = at::TensorOptions().dtype(dtype).device(c10::kCUDA, index);
      const at::Tensor a = at::ones({64, 64}, options).requires_grad_(true);
      const at::Tensor bias = at::zeros({64}, options).requires_grad_(true);
      at::add(at::addmm(bias, a, a), at::mm(a, a)).sum().backward();
    }
    c10::cuda::getCurrentCUDAStream(index).synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    // Everything LibTorch still holds: the workspaces, made now or by an earlier run in this
    // process (a second engine in one process must count them too), and any live tensors.
    return compat::cuda_reserved_bytes(device_index).current;
  } catch (const c10::Error& e) {
    PSTAR_THROW(ConfigError, "CUDA device ", device_index,
                ": a first matrix product failed: ", e.what_without_backtrace());
  }
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
