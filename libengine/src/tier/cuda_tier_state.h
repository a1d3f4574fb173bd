// The CUDA tier's state that outlives the tier object (libengine/src/tier, private): the streams
// and events its work is ordered by, the copies still queued, and the blocks whose release waits
// for the work queued before it (the deferred release, Note [stream-ordered reuse]). The DeviceTier
// itself, its allocation, copies and kernels, is in cuda_tier.cpp. Built only where the CUDA tier
// is (libengine/src/tier/sources.cmake).
#pragma once

#include "pstar/core/torch_cuda_compat.h"  // first: it must precede every c10/cuda header

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "pstar/cuda/error.h"
#include "pstar/cuda/memory.h"
#include "pstar/cuda/stream.h"
#include "pstar/memory/host_pool.h"

#if !PSTAR_HAVE_CUDA_TIER
#error \
    "the CUDA tier is compiled only with PSTAR_HAVE_CUDA_TIER=1 (libengine/src/tier/sources.cmake)"
#endif

namespace pstar::tier::cuda_impl {

inline void check(cudaError_t status, const char* operation) {
  if (status != cudaSuccess) cuda::throw_error(static_cast<int>(status), operation);
}

// LibTorch's current stream on `device`: where the model's kernels, and so the tier's own compute,
// run. Looked up on every use, since the caller may switch streams.
inline cudaStream_t compute_stream(int device) {
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

  ~CudaTierState();

  CudaTierState(const CudaTierState&) = delete;
  CudaTierState& operator=(const CudaTierState&) = delete;

  // Made current by the caller before construction: the arena, the stream and the events belong to
  // the device current then.
  const int device;
  cuda::DeviceArena arena;
  cuda::PinnedHostPool pinned;
  memory::HostPool pageable;  // host blocks no copy touches in steady state
  cuda::Stream copies[kCopyStreams];
  // Note [communication stream]: where another thread's work runs (the chunk engine's
  // collectives), ordered after the compute stream by marks, and waited for by that thread.
  cuda::Stream communication;

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

  cuda::Event take_event_locked();

  void recycle_locked(AfterAll& after);

  AfterAll mark_all_locked();

  // Frees the retired blocks whose work has finished, and forgets the unsettled ranges whose work
  // has.
  void reap_locked();

  // Note [stream-ordered reuse]
  // At steady state the chunk payloads fill the arena to within a block, so an upload needs the
  // memory of the block just evicted, whose copy to the host is still queued behind compute.
  // Waiting for it on the host would stall the thread that queues kernels (and, through
  // synchronize(), the whole device) once per upload. Instead the retired device blocks go back to
  // the arena at once, oldest first, until the request fits; their ranges stay "unsettled" until
  // their work finishes, and a block allocated over one makes every stream wait for that work on
  // the device, which is what the host would have waited for, without blocking it. Returns whether
  // anything was handed back.
  bool settle_in_stream_order_locked();

  // Orders every stream after the work on the unsettled memory inside [p, p + bytes).
  void wait_unsettled_locked(const void* p, int64_t bytes);

  static CopySpan span_of(const void* p, int64_t bytes);

  // Records that a copy ahead queued on the upload stream just now writes [p, p + bytes).
  void note_ahead_locked(const void* p, int64_t bytes);

  // Records that a copy queued on copy stream `s` just now reads or writes host [p, p + bytes).
  void note_host_copy_locked(int s, const void* p, int64_t bytes);

  // An event back to the spares, unless a waiting thread still holds it (it is freed with the
  // last holder then).
  void recycle_locked(std::shared_ptr<cuda::Event> event);

  // The host may read or write host memory only once the copies queued from or into it are done.
  // Each copy stream runs in order, so waiting for the last copy on it touching any of `ranges`
  // (pointer, bytes; null pointers are skipped) completes every copy queued on it before that one
  // too. The waits are outside the lock, so that other threads queue copies meanwhile.
  void wait_host(const Ranges& ranges);

  // Makes `stream` wait for the copies ahead into [p, p + bytes), on the device.
  void await_ahead_locked(const void* p, int64_t bytes, cudaStream_t stream);

  // Everything queued has finished: no copy is pending any more.
  void forget_pending_locked();

  // From a block's owner: the memory goes back to the arena or a pool only once every stream has
  // passed this point.
  void retire(cuda::DeviceBlock device_block, cuda::PinnedBlock host_block,
              memory::HostBlock pageable_block = memory::HostBlock()) noexcept;
};

}  // namespace pstar::tier::cuda_impl
