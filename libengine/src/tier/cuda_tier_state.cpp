#include "cuda_tier_state.h"

#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <iterator>

namespace pstar::tier::cuda_impl {

CudaTierState::~CudaTierState() {
  // Every block and the tier are gone; wait for what still uses retired memory before the arena
  // and the pool free it. Errors are ignored: at process exit the runtime may be gone already.
  try {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    for (const Retired& r : retired) r.after.synchronize();
    for (const Unsettled& u : unsettled) u.after.synchronize();
    for (cuda::Stream& stream : copies) stream.synchronize();
    communication.synchronize();
  } catch (...) {
  }
}

cuda::Event CudaTierState::take_event_locked() {
  if (spare_events.empty()) return cuda::Event(false);
  cuda::Event event = std::move(spare_events.back());
  spare_events.pop_back();
  return event;
}

void CudaTierState::recycle_locked(AfterAll& after) {
  for (cuda::Event& e : after.copies) spare_events.push_back(std::move(e));
  spare_events.push_back(std::move(after.compute));
}

AfterAll CudaTierState::mark_all_locked() {
  AfterAll after{{take_event_locked(), take_event_locked()}, take_event_locked()};
  for (int i = 0; i < kCopyStreams; ++i) after.copies[i].record(copies[i]);
  check(cudaEventRecord(after.compute.native(), compute_stream(device)),
        "cudaEventRecord on the compute stream");
  return after;
}

void CudaTierState::reap_locked() {
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

bool CudaTierState::settle_in_stream_order_locked() {
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

void CudaTierState::wait_unsettled_locked(const void* p, int64_t bytes) {
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

CopySpan CudaTierState::span_of(const void* p, int64_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return CopySpan{a, a + static_cast<uintptr_t>(bytes)};
}

void CudaTierState::note_ahead_locked(const void* p, int64_t bytes) {
  PendingCopy pending{span_of(p, bytes), take_event_locked()};
  pending.done.record(copies[kUploads]);
  ahead.push_back(std::move(pending));
}

void CudaTierState::note_host_copy_locked(int s, const void* p, int64_t bytes) {
  HostCopy pending{span_of(p, bytes), std::make_shared<cuda::Event>(take_event_locked())};
  pending.done->record(copies[s]);
  host_copies[s].push_back(std::move(pending));
}

void CudaTierState::recycle_locked(std::shared_ptr<cuda::Event> event) {
  if (event.use_count() == 1) spare_events.push_back(std::move(*event));
}

void CudaTierState::wait_host(const Ranges& ranges) {
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

void CudaTierState::await_ahead_locked(const void* p, int64_t bytes, cudaStream_t stream) {
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

void CudaTierState::forget_pending_locked() {
  for (PendingCopy& pending : ahead) spare_events.push_back(std::move(pending.done));
  ahead.clear();
  for (std::vector<HostCopy>& list : host_copies) {
    for (HostCopy& pending : list) recycle_locked(std::move(pending.done));
    list.clear();
  }
}

void CudaTierState::retire(cuda::DeviceBlock device_block, cuda::PinnedBlock host_block,
                           memory::HostBlock pageable_block) noexcept {
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

}  // namespace pstar::tier::cuda_impl
