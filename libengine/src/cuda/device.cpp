#include "pstar/cuda/device.h"

#include <cuda_runtime.h>

#include <cstdio>

#include "check.h"
#include "pstar/base/size.h"

namespace pstar::cuda {
namespace {

// cudaGetDeviceCount's result, or the error it gave.
struct Count {
  int devices = 0;
  cudaError_t error = cudaSuccess;
};

Count count_devices() {
  Count c;
  c.error = cudaGetDeviceCount(&c.devices);
  if (c.error != cudaSuccess) {
    (void)cudaGetLastError();
    c.devices = 0;
  }
  return c;
}

void check_index(int device) {
  const int n = device_count();
  PSTAR_CHECK(device >= 0 && device < n, ConfigError, "CUDA device ", device, " does not exist (",
              n, n == 1 ? " device" : " devices",
              n == 0 ? str_cat(": ", no_device_reason()) : std::string(), ")");
}

}  // namespace

int device_count() { return count_devices().devices; }

std::string no_device_reason() {
  const Count c = count_devices();
  if (c.error != cudaSuccess) return error_message(static_cast<int>(c.error), "cudaGetDeviceCount");
  if (c.devices == 0) return "cudaGetDeviceCount found no device";
  return "";
}

DeviceInfo device_info(int device) {
  check_index(device);
  cudaDeviceProp prop{};
  PSTAR_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties(", device, ")");
  // CUDA 13 dropped memoryClockRate from cudaDeviceProp; the attribute remains.
  int clock_khz = 0;
  PSTAR_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device),
                   "cudaDeviceGetAttribute(cudaDevAttrMemoryClockRate, ", device, ")");
  DeviceInfo info;
  info.index = device;
  info.name = prop.name;
  info.compute_capability_major = prop.major;
  info.compute_capability_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.memory_bus_width_bits = prop.memoryBusWidth;
  info.memory_clock_khz = clock_khz;
  info.peak_memory_bandwidth_bytes_per_s =
      2.0 * static_cast<double>(clock_khz) * 1e3 * static_cast<double>(prop.memoryBusWidth) / 8.0;
  char bus_id[32] = {0};
  PSTAR_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device), "cudaDeviceGetPCIBusId(",
                   device, ")");
  info.pci_bus_id = bus_id;
  return info;
}

MemoryInfo memory_info(int device) {
  check_index(device);
  int previous = 0;
  PSTAR_CUDA_CHECK(cudaGetDevice(&previous), "cudaGetDevice");
  // Restores the caller's device on every path, the throwing ones included.
  struct Restore {
    int device;
    bool changed;
    ~Restore() {
      if (changed) (void)cudaSetDevice(device);
    }
  } restore{previous, previous != device};
  if (restore.changed) {
    PSTAR_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice(", device, ")");
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  PSTAR_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo on device ", device);
  MemoryInfo info;
  info.free_bytes = static_cast<int64_t>(free_bytes);
  info.total_bytes = static_cast<int64_t>(total_bytes);
  return info;
}

std::string describe_device(int device) {
  const DeviceInfo info = device_info(device);
  char bandwidth[32] = "unknown bandwidth";
  if (info.peak_memory_bandwidth_bytes_per_s > 0) {
    std::snprintf(bandwidth, sizeof bandwidth, "%.2f TB/s",
                  info.peak_memory_bandwidth_bytes_per_s / 1e12);
  }
  return str_cat(info.name, " (device ", device, ", sm_", info.compute_capability_major,
                 info.compute_capability_minor, ", ", info.multiprocessors, " SMs, ",
                 format_bytes(info.total_memory_bytes), ", ", bandwidth, ")");
}

void set_device(int device) {
  check_index(device);
  PSTAR_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice(", device, ")");
}

int current_device() {
  int device = 0;
  PSTAR_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

void synchronize_device() { PSTAR_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

}  // namespace pstar::cuda
