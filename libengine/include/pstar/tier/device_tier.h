// The device tier: the memory and kernels the chunk engine places chunks on, behind one interface
// with two implementations, chosen once at start-up (Note [device tier]).
//
// Note [device tier]
// The chunk engine (engine/ (chunked_engine.cpp, moments.cpp)) decides what lives where; a
// DeviceTier carries it out. It owns the memory of both sides a chunk payload can be on, kDevice
// (where LibTorch computes) and kHost, copies payloads between them, runs Adam and the gradient sum
// of squares on either side, and measures the compute device's non-model memory. The engine asks
// the same questions of either implementation and never asks which one it has:
// - the emulated tier (make_emulated_tier): both sides are 64-byte aligned host blocks from
//   exact-size pools (memory::HostPool, Note [exact-size host pool]), copies are memcpy, Adam is
//   host Adam on both sides, and non-model memory is LibTorch's CPU allocations
//   (memory::CpuAllocationCounter). It is what every machine without a GPU trains with, and what
//   the tests of placement, eviction and budgets run on.
// - the CUDA tier (make_cuda_tier, only in builds with a CUDA LibTorch): kDevice blocks come from
//   one cuda::DeviceArena the size of engine.device_memory, kHost blocks from an exact-size
//   cuda::PinnedHostPool, or for payloads that never move from a memory::HostPool of pageable
//   memory (Note [pinned what moves]); copies run on a side stream ordered with LibTorch's compute
//   stream by events; Adam on the device side is cuda::adam_step; non-model memory is LibTorch's
//   CUDA caching allocator's.
// Both give the same bits for every operation (host Adam and the CUDA kernel agree bit for bit,
// Note [cuda adam bit identity]; the sum of squares follows Note [grad sq sum order] on both
// sides), so where a chunk is placed never changes the numbers.
//
// Ordering. Everything a tier does is ordered as if it ran at once, in call order, with the
// LibTorch computations the caller queues in between: a copy() is complete for the compute that
// follows it on the destination side, and the memory of a released Block is reused only after
// the work queued before the release has finished. Host code that reads or writes payloads itself
// (a checkpoint, a collective over host memory) calls synchronize() first. The one exception is
// copy_ahead(): the compute the caller queues after it is ordered after it only once the caller
// calls await_copies() on its destination, so that an upload for the next module can run while
// the current one computes (Note [prefetch] in engine/chunked_engine.h).
//
// Threads. One thread drives a tier, except that adam_step, grad_sq_sum and zero on kHost buffers
// may also run on one other thread at the same time, on blocks the driving thread leaves alone
// meanwhile (the chunk engine's host Adam worker, Note [host adam overlap]). They still wait for
// the copies the driving thread queued into or out of those blocks before. A third thread may
// queue LibTorch work and collectives of its own on blocks the driving thread leaves alone
// meanwhile, inside a communication stream's scope (Note [communication stream]).
//
// Note [communication stream]
// A thread other than the driving one may queue device work of its own: the chunk engine's
// communication thread (Note [collectives beside compute] in engine/group_sync.h), whose
// collectives read and write payloads the driving thread prepared. On the CUDA tier that work runs
// on a stream of the tier's own, so that a collective queued while the model computes waits only
// for the work that prepared its buffers, not for every kernel queued on the compute stream by the
// time it starts. The driving thread takes a mark_compute() once the collective's inputs are in
// place (after the copies into them and the allocations of its buffers); the other thread enters
// the communication stream after that mark (enter_comm_stream), queues its work, and finish()es
// the scope, which returns once that work has completed. So the driving thread may use or release
// the collective's buffers once it knows the other thread has finished, with no wait on the
// device; between the mark and that moment it must leave them alone, exactly as it must on the
// emulated tier, where the other thread really runs beside it (the checking tier of the tests
// holds the engine to it). The emulated tier has no streams: its mark is null and its scope
// nothing. PSTAR_COMM_STREAM=0 keeps the CUDA tier's other thread on LibTorch's current stream, as
// before this note (a diagnosis switch).

// Note [pinned what moves]
// Copies between the sides run asynchronously only from and into page-locked host memory, and
// page-locked memory is scarce (the system can neither swap nor reclaim it, and pinning it is
// slow). So the host side has two kinds of block: allocate() and allocate_uninitialized() give
// memory fit for copies (pinned on the CUDA tier), allocate_host_only() ordinary pageable memory,
// for payloads that stay on the host: the chunk engine's optimizer state outside the device margin
// and the payloads of chunks that always compute on the host. Both kinds come from exact-size pools
// (Note [exact-size host pool] in pstar/memory/exact_size_pool.h), host_memory() reports what each
// holds, and trim() gives back the free blocks once the engine's plan has fixed what moves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include "pstar/memory/stat.h"
#include "pstar/optim/host_adam.h"

namespace pstar::tier {

// The two places a payload can be.
enum class Side : uint8_t { kDevice, kHost };

const char* side_name(Side side);

// Memory of one side of a tier, owned: move-only, and destroying or reset()ting it gives the
// memory back to its tier (see Ordering in Note [device tier]).
class Block {
 public:
  // What keeps a block's memory: destroying it frees the memory.
  struct Owner {
    virtual ~Owner() = default;
  };

  Block() = default;
  Block(void* data, int64_t bytes, Side side, std::unique_ptr<Owner> owner);
  Block(Block&&) noexcept = default;
  Block& operator=(Block&&) noexcept = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() = default;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  Side side() const { return side_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();

 private:
  std::unique_ptr<Owner> owner_;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Side side_ = Side::kHost;
};

// Note [communication stream]: the work queued on a tier's compute stream up to some moment.
class StreamMark {
 public:
  virtual ~StreamMark() = default;
};

// Note [communication stream]: the communication stream made current on one thread, until it is
// destroyed there. Destroying it unfinished (an error on its way) waits for nothing: its work may
// be a collective that will never complete, and the run is ending.
class CommStreamScope {
 public:
  virtual ~CommStreamScope() = default;
  // Waits until the work queued in the scope has completed; throws what the device reported.
  virtual void finish() = 0;
  // Declares [data, data + bytes) read or written by the work of this scope. The CUDA tier keeps
  // no list: the driving thread waits on the host before it touches such a range again. A tier
  // that checks the rule above (the tests' checking tier) holds the driving thread to it for these
  // ranges.
  virtual void uses(const void* /*data*/, int64_t /*bytes*/) {}
};

class DeviceTier {
 public:
  virtual ~DeviceTier() = default;

  // For logs: "emulated on the CPU", "CUDA device 0 (NVIDIA H100 80GB HBM3)".
  virtual std::string describe() const = 0;
  // Where LibTorch computes on the device side (the model's activations, its inputs).
  virtual c10::Device compute_device() const = 0;
  // Where tensors over a block of `side` live.
  virtual c10::Device device_of(Side side) const = 0;

  // The most chunk payload bytes the device side can hold at once, whatever the budget leaves room
  // for: the CUDA tier's arena (engine.device_memory less what LibTorch's own allocations need);
  // for the emulated tier, no limit of its own (INT64_MAX): the budget decides.
  virtual int64_t device_capacity_bytes() const = 0;
  // Whether host code may read and write device-side blocks through their pointers: yes on the
  // emulated tier, whose device side is host memory; no on the CUDA tier. Where not, collectives
  // over host memory stage device payloads through host blocks (Note [staged collectives] in
  // engine/group_sync.h).
  virtual bool host_addresses_device() const { return true; }

  // Zeroed memory of `bytes` (> 0) on `side`; host memory is zeroed over every intra-op thread
  // (Note [parallel first touch]). Throws OutOfMemoryError naming the side and the size when there
  // is not enough.
  virtual Block allocate(Side side, int64_t bytes) = 0;
  // Memory like allocate()'s whose contents are undefined: for the destination of a copy that
  // writes all of it before anything reads it (a chunk's move). Zeroing it first would cost a
  // pass over the memory for nothing (on the CUDA tier, a host memset of a whole pinned block on
  // the thread that launches kernels).
  virtual Block allocate_uninitialized(Side side, int64_t bytes) = 0;
  // Zeroed kHost memory like allocate(kHost, bytes)'s, for a payload that no copy between the
  // sides touches in steady state (Note [pinned what moves]): copies into or out of it stay
  // correct, but may be slow (on the CUDA tier it is pageable memory, which a copy stages through
  // a driver buffer while the host waits).
  virtual Block allocate_host_only(int64_t bytes) = 0;
  // Memory like allocate(side, bytes)'s, or with `host_only` (side kHost) like
  // allocate_host_only(bytes)'s, whose contents are undefined: for a payload its owner fills whole
  // before anything reads it (a new chunk's parameters and master weights, whose values are written
  // next and whose padding is zeroed: Note [parallel first touch] in pstar/core/parallel_fill.h).
  virtual Block allocate_unfilled(Side side, int64_t bytes, bool host_only) = 0;
  // Sets aside `count` blocks of `bytes` of host memory fit for copies, for the allocate(kHost,
  // bytes) and allocate_unfilled(kHost, bytes, false) calls to come, made at once over several
  // threads (Note [reserved blocks] in pstar/memory/exact_size_pool.h: the CUDA tier pins them side
  // by side instead of one cudaHostAlloc per chunk payload). They count as held host memory
  // (host_memory()) until used or trimmed. Throws OutOfMemoryError as allocate() does; the blocks
  // made before stay reserved.
  virtual void reserve_host(int64_t bytes, int64_t count) = 0;
  // Copies the first `bytes` of src into dst (either side to either side).
  virtual void copy(Block& dst, const Block& src, int64_t bytes) = 0;
  // A copy into a kDevice block ahead of its use (a prefetch): LibTorch's compute queued after it
  // may run alongside it, until await_copies(dst). Everything else is ordered as for copy(): the
  // tier's own operations on dst (a copy out of it, zero, the kernels) and synchronize() come after
  // it, and src may be released or written by the tier once it returns.
  virtual void copy_ahead(Block& dst, const Block& src, int64_t bytes) = 0;
  // Makes the compute queued from now on wait for every copy_ahead into `block`, on the device
  // (the host does not block). A no-op when none is outstanding.
  virtual void await_copies(const Block& block) = 0;
  // Sets the first `bytes` of a block to zero.
  virtual void zero(Block& block, int64_t bytes) = 0;

  // One fused Adam pass (optim::host_adam_step's contract) over buffers that are all on `side`.
  virtual void adam_step(Side side, const optim::AdamHyper& hyper, float grad_multiplier,
                         const optim::AdamSpan& span) = 0;
  // optim::host_adam_hold's contract (Note [held parameters] in engine/adam_steps.h) over buffers
  // on `side`: the parameter copy rounded from the master, the redirected state copied. By default
  // with LibTorch on the side's device (host memory: host_adam_hold itself); only a host span is
  // ever redirected.
  virtual void adam_hold(Side side, const optim::AdamSpan& span);
  // optim::grad_sq_sum of a buffer on `side`, with the same bits on either side.
  virtual double grad_sq_sum(Side side, const void* grad, optim::GradType grad_type,
                             int64_t numel) = 0;
  // grad_sq_sum of each of `grads`, all on `side`, into out[i]: the same bits as one call each.
  // The CUDA tier queues every device-side sum and waits for their results once, rather than once
  // per chunk (the gradient norm sums every margin chunk at each step). By default, one call each.
  struct GradRef {
    const void* grad = nullptr;
    optim::GradType grad_type = optim::GradType::kF32;
    int64_t numel = 0;
  };
  virtual void grad_sq_sums(Side side, const std::vector<GradRef>& grads, double* out);

  // Non-model memory on the compute device: what LibTorch holds there now, and the most it held
  // at once since the last reset_non_model_peak(), which starts a new window at the current level
  // and returns the old window's peak.
  virtual int64_t non_model_bytes() = 0;
  virtual int64_t non_model_peak_bytes() = 0;
  virtual int64_t reset_non_model_peak() = 0;

  // Note [device footprint]
  // device_peak_bytes counts what the chunk engine plans with: chunk payloads on the device plus
  // LibTorch's live non-model allocations. The device holds more than that on a GPU: the caching
  // allocator keeps what it freed (reserved >= allocated), the CUDA tier sets the whole arena aside
  // at start-up, its kernels keep scratch, and the CUDA context and libraries sit below all of it.
  // The engine adds these up per step (device_reserved_peak_bytes) and checks the budget against
  // that sum; the context is reported beside it, since engine.device_memory's default is measured
  // after the context exists.
  struct Footprint {
    // Memory set aside for chunk payloads whatever they use of it (the CUDA arena); 0 where
    // payloads are allocated one by one (the emulated tier), so the engine counts its own.
    int64_t payload_reserve_bytes = 0;
    int64_t scratch_bytes = 0;  // the tier's kernels' own device buffers
    int64_t context_bytes = 0;  // in use on the device before the tier was made
  };
  virtual Footprint footprint() { return Footprint{}; }
  // What LibTorch held reserved on the compute device at most in the current non-model window
  // (reset with reset_non_model_peak()): the CUDA caching allocator's reserved bytes. By default
  // the allocated peak (an allocator that keeps nothing back).
  virtual int64_t non_model_reserved_peak_bytes() { return non_model_peak_bytes(); }

  // Note [communication stream]: a mark of what the calling thread has queued on its compute
  // stream so far; null on a tier without streams.
  virtual std::shared_ptr<const StreamMark> mark_compute() { return nullptr; }
  // Note [communication stream]: on a thread other than the driving one, makes the tier's
  // communication stream current until the scope is destroyed, ordered after `after` (a mark of
  // this tier's, or null where mark_compute() gives none); null on a tier without streams, or where
  // the stream is switched off.
  virtual std::unique_ptr<CommStreamScope> enter_comm_stream(const StreamMark* after) {
    (void)after;
    return nullptr;
  }

  // Waits until everything queued so far has finished, so that the host may touch any block.
  virtual void synchronize() = 0;
  // Whole-device synchronisations the tier made on its own so far, not counting synchronize()
  // calls: the CUDA tier's last resort when memory retired on the device is all that is missing
  // (Note [stream-ordered reuse]). A steady state makes none.
  virtual int64_t own_synchronizations() const { return 0; }

  // The host memory the tier holds for payloads (blocks in use and free blocks kept for reuse,
  // Note [exact-size host pool]): `pinned`, page-locked for copies (the emulated tier counts what
  // it would pin: its allocate(kHost) and allocate_uninitialized(kHost) blocks), and `pageable`
  // (allocate_host_only's).
  struct HostMemory {
    memory::Stat pinned, pageable;
    int64_t current() const { return pinned.current + pageable.current; }
  };
  virtual HostMemory host_memory() const = 0;
  // Gives the free blocks the tier keeps for reuse back to the system (on the CUDA tier after the
  // work queued on them has finished, which it waits for); returns the host bytes given back.
  virtual int64_t trim() = 0;

  // A tensor over `block` from element `offset` of `dtype`, with `shape`. It does not own the
  // memory: the block must outlive it.
  at::Tensor view(const Block& block, c10::ScalarType dtype, int64_t offset,
                  c10::IntArrayRef shape) const;
};

// The emulated device tier (Note [device tier]).
std::unique_ptr<DeviceTier> make_emulated_tier();

// Whether this build has the CUDA tier (a CUDA LibTorch and the pstar_cuda kernels).
bool cuda_tier_built();

// The CUDA tier on device `device_index`, whose device side is one arena of `arena_bytes` (the
// chunk payloads' share of engine.device_memory). Throws ConfigError when this build has no CUDA
// tier or the device is unusable, and OutOfMemoryError naming the free device memory when the
// arena does not fit.
std::unique_ptr<DeviceTier> make_cuda_tier(int device_index, int64_t arena_bytes);

// The memory free on a CUDA device now (engine.device_memory's default is a share of it:
// plan::resolve_run). Throws ConfigError like make_cuda_tier when this build has no CUDA tier or
// the device does not exist.
int64_t cuda_free_bytes(int device_index);

// The PCI bus id of a CUDA device ("0000:3B:00.0"), for Note [numa binding]. ConfigError like
// cuda_free_bytes.
std::string cuda_pci_bus_id(int device_index);

// The tier for a compute device: emulated for kCPU, CUDA (an arena of `arena_bytes`) for kCUDA.
std::unique_ptr<DeviceTier> make_device_tier(c10::Device device, int64_t arena_bytes);

// Note [library workspaces]
// cuBLAS keeps a workspace per handle and stream in LibTorch's caching allocator from the first
// matrix product on, for the life of the process (LibTorch 2.x: 32 MiB on Hopper), and autograd's
// device thread has a handle of its own. The warm-up measures them as non-model memory (a
// 168k-parameter GPT "needed" 67 MiB of activations on an H200: two such workspaces, by that
// figure), but the CUDA arena is sized
// before it, from predicted activations that know nothing of them, and then arena plus LibTorch's
// reserved memory overran a tight engine.device_memory. So before the arena is sized, one matrix
// product of each kind (mm, addmm) runs forward and backward in the compute dtype, and the bytes
// LibTorch holds reserved afterwards (its cache emptied of the products' own tensors) count as
// non-model memory from the start: all of them, not only what the products added, since a second
// engine in one process finds the workspaces already made (and any live tensors of the caller's
// occupy the device all the same). 0 on the CPU (the emulated tier has no such libraries).
int64_t library_workspace_bytes(c10::Device device, c10::ScalarType dtype);
// The same for CUDA device `device_index`; ConfigError like cuda_free_bytes in builds without the
// CUDA tier.
int64_t cuda_library_workspace_bytes(int device_index, c10::ScalarType dtype);

}  // namespace pstar::tier
