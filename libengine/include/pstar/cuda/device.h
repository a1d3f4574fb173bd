// Which CUDA devices this process sees. None of these functions needs a GPU to be called:
// device_count() is 0, not an error, without a driver or a device.
#pragma once

#include <cstdint>
#include <string>

namespace pstar::cuda {

// The number of CUDA devices; 0 when there is none, no driver, or the driver is too old for this
// build's runtime (the reason is in no_device_reason()).
int device_count();

// Why device_count() is 0, e.g. "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA
// runtime version (cudaErrorInsufficientDriver)"; empty when there is a device.
std::string no_device_reason();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessors = 0;
  int64_t total_memory_bytes = 0;
  int memory_bus_width_bits = 0;
  int64_t memory_clock_khz = 0;
  // 2 (double data rate) x memory clock x bus width: the figure vendors quote (3.35 TB/s for an
  // H100 SXM); 0 when the driver reports no memory clock.
  double peak_memory_bandwidth_bytes_per_s = 0.0;
  // "0000:3B:00.0" (cudaDeviceGetPCIBusId): where sysfs says which NUMA node the GPU is on (Note
  // [numa binding] in pstar/core/numa.h).
  std::string pci_bus_id;
};

// Throws ConfigError when `device` is not in [0, device_count()).
DeviceInfo device_info(int device);

// What the driver reports free and in total on a device right now (cudaMemGetInfo). Other
// processes and earlier allocations of this one count as used.
struct MemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// Throws ConfigError when `device` is not in [0, device_count()). The device is made current for
// the query and the caller's current device restored; the query creates the device's context if
// it has none yet.
MemoryInfo memory_info(int device);

// One line for logs, e.g. "NVIDIA H100 80GB HBM3 (device 0, sm_90, 132 SMs, 79.19 GiB, 3.35 TB/s)".
std::string describe_device(int device);

// The calling thread's current device (cudaSetDevice / cudaGetDevice). Streams, events and
// allocations belong to the device that is current when they are created.
void set_device(int device);
int current_device();

// Waits for all work on the current device (cudaDeviceSynchronize).
void synchronize_device();

}  // namespace pstar::cuda
