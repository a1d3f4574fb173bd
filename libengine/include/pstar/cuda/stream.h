// RAII owners of CUDA streams and events, and asynchronous copies on a stream.
//
// The handles are CUDA's own opaque types, declared here without a CUDA header: CUstream_st* is a
// cudaStream_t and CUevent_st* a cudaEvent_t, so native() can be handed to CUDA (or LibTorch's
// CUDA stream wrappers) without a cast.
#pragma once

#include <cstdint>
#include <memory>

struct CUstream_st;
struct CUevent_st;

namespace pstar::cuda {

// A non-blocking stream on the device current at construction (it does not synchronize with the
// legacy default stream). Move-only; destroying it does not wait for its work, which CUDA lets
// finish.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Blocks the calling thread until all work queued on the stream has finished.
  void synchronize();
  // True if all work queued on the stream has finished.
  bool query() const;
  // The cudaStream_t. Throws InternalError on a moved-from stream, whose handle would be the
  // legacy default stream.
  CUstream_st* native() const;

 private:
  struct Destroy {
    void operator()(CUstream_st* stream) const;
  };
  std::unique_ptr<CUstream_st, Destroy> stream_;
};

// An event on the device current at construction. With timing (the default) two recorded events
// give the time between them; without, recording and waiting are cheaper.
class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&&) noexcept;
  Event& operator=(Event&&) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Captures the work queued on `stream` so far.
  void record(Stream& stream);
  // Makes work queued on `stream` after this call wait until the recorded work has finished,
  // without blocking the host (cudaStreamWaitEvent).
  void wait(Stream& stream) const;
  // Blocks the calling thread until the recorded work has finished.
  void synchronize() const;
  // True if the recorded work has finished (or nothing was recorded).
  bool query() const;
  // Milliseconds between two recorded, completed timing events (about 0.5 us resolution). Throws
  // InternalError if either has no timing or has not been recorded.
  static float elapsed_ms(const Event& start, const Event& end);
  CUevent_st* native() const;

 private:
  struct Destroy {
    void operator()(CUevent_st* event) const;
  };
  std::unique_ptr<CUevent_st, Destroy> event_;
};

// Queues a copy of `bytes` on `stream` and returns. With pinned host memory (PinnedHostPool) the
// copy is asynchronous and overlaps other streams; with pageable memory CUDA stages it and it may
// return only when done. Either way the host buffer must stay valid, and unchanged for an upload,
// until the stream has reached the copy (Event::record + synchronize, or Stream::synchronize).
// bytes == 0 queues nothing.
void copy_h2d_async(void* device_dst, const void* host_src, int64_t bytes, Stream& stream);
void copy_d2h_async(void* host_dst, const void* device_src, int64_t bytes, Stream& stream);
void copy_d2d_async(void* device_dst, const void* device_src, int64_t bytes, Stream& stream);
// Sets `bytes` of device memory to `value` (cudaMemsetAsync).
void memset_async(void* device_dst, int value, int64_t bytes, Stream& stream);

}  // namespace pstar::cuda
