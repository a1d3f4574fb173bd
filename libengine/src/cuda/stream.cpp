#include "pstar/cuda/stream.h"

#include <cuda_runtime.h>

#include "check.h"
#include "pstar/base/size.h"

namespace pstar::cuda {
namespace {

// cudaSuccess -> true, cudaErrorNotReady -> false, anything else throws.
//
// A query that answers cudaErrorNotReady also sets the calling thread's last error to it, and the
// next launch check on that thread (LibTorch's C10_CUDA_KERNEL_LAUNCH_CHECK, or pstar's own in
// adam_kernel.cu and sq_sum_kernel.cu) would then throw "device not ready" for a kernel that
// launched fine. "Not ready" is an answer, not an error: clear it, as LibTorch's own stream and
// event queries do. It is not sticky, so clearing cannot hide a real failure of the context.
bool ready(cudaError_t status, const char* operation) {
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  PSTAR_CUDA_CHECK(status, operation);
  return true;
}

void check_copy(const void* dst, const void* src, int64_t bytes, const char* what) {
  PSTAR_CHECK(bytes >= 0, ConfigError, what, ": bytes must be >= 0, got ", bytes);
  PSTAR_CHECK(bytes == 0 || (dst != nullptr && src != nullptr), ConfigError, what, " of ",
              format_bytes(bytes), ": null pointer");
}

}  // namespace

// Destructors ignore errors: they cannot throw, and the one error expected there is the runtime
// shutting down at process exit, when the handle is gone anyway.
void Stream::Destroy::operator()(CUstream_st* stream) const { (void)cudaStreamDestroy(stream); }

Stream::Stream() {
  cudaStream_t stream = nullptr;
  PSTAR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_.reset(stream);
}

Stream::~Stream() = default;
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;

CUstream_st* Stream::native() const {
  PSTAR_INTERNAL_ASSERT(stream_ != nullptr, "use of a moved-from cuda::Stream");
  return stream_.get();
}

void Stream::synchronize() {
  PSTAR_CUDA_CHECK(cudaStreamSynchronize(native()), "cudaStreamSynchronize");
}

bool Stream::query() const { return ready(cudaStreamQuery(native()), "cudaStreamQuery"); }

void Event::Destroy::operator()(CUevent_st* event) const { (void)cudaEventDestroy(event); }

Event::Event(bool timing) {
  cudaEvent_t event = nullptr;
  PSTAR_CUDA_CHECK(
      cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming),
      "cudaEventCreate");
  event_.reset(event);
}

Event::~Event() = default;
Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;

CUevent_st* Event::native() const {
  PSTAR_INTERNAL_ASSERT(event_ != nullptr, "use of a moved-from cuda::Event");
  return event_.get();
}

void Event::record(Stream& stream) {
  PSTAR_CUDA_CHECK(cudaEventRecord(native(), stream.native()), "cudaEventRecord");
}

void Event::wait(Stream& stream) const {
  PSTAR_CUDA_CHECK(cudaStreamWaitEvent(stream.native(), native(), 0), "cudaStreamWaitEvent");
}

void Event::synchronize() const {
  PSTAR_CUDA_CHECK(cudaEventSynchronize(native()), "cudaEventSynchronize");
}

bool Event::query() const { return ready(cudaEventQuery(native()), "cudaEventQuery"); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  PSTAR_CUDA_CHECK(cudaEventElapsedTime(&ms, start.native(), end.native()),
                   "cudaEventElapsedTime (both events need timing, and both must have completed)");
  return ms;
}

void copy_h2d_async(void* device_dst, const void* host_src, int64_t bytes, Stream& stream) {
  check_copy(device_dst, host_src, bytes, "copy_h2d_async");
  if (bytes == 0) return;
  PSTAR_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, static_cast<size_t>(bytes),
                                   cudaMemcpyHostToDevice, stream.native()),
                   "cudaMemcpyAsync host to device of ", format_bytes(bytes));
}

void copy_d2h_async(void* host_dst, const void* device_src, int64_t bytes, Stream& stream) {
  check_copy(host_dst, device_src, bytes, "copy_d2h_async");
  if (bytes == 0) return;
  PSTAR_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToHost, stream.native()),
                   "cudaMemcpyAsync device to host of ", format_bytes(bytes));
}

void copy_d2d_async(void* device_dst, const void* device_src, int64_t bytes, Stream& stream) {
  check_copy(device_dst, device_src, bytes, "copy_d2d_async");
  if (bytes == 0) return;
  PSTAR_CUDA_CHECK(cudaMemcpyAsync(device_dst, device_src, static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToDevice, stream.native()),
                   "cudaMemcpyAsync device to device of ", format_bytes(bytes));
}

void memset_async(void* device_dst, int value, int64_t bytes, Stream& stream) {
  check_copy(device_dst, device_dst, bytes, "memset_async");
  if (bytes == 0) return;
  PSTAR_CUDA_CHECK(cudaMemsetAsync(device_dst, value, static_cast<size_t>(bytes), stream.native()),
                   "cudaMemsetAsync of ", format_bytes(bytes));
}

}  // namespace pstar::cuda
