// The parts of pstar_cuda's runtime layer that need no device: the device query on a machine
// without one, and the mapping of CUDA errors to pstar's typed errors. They pass with or without a
// GPU.
#include <string>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/cuda/device.h"
#include "pstar/cuda/error.h"

namespace pstar::cuda {
namespace {

// cudaError_t values (driver_types.h), spelled out since the public headers include no CUDA.
constexpr int kInvalidValue = 1;
constexpr int kMemoryAllocation = 2;
constexpr int kInsufficientDriver = 35;
constexpr int kNoDevice = 100;
constexpr int kIllegalAddress = 700;

TEST(CudaDeviceQuery, CountsWithoutThrowingAndSaysWhyThereIsNone) {
  int n = -1;
  EXPECT_NO_THROW(n = device_count());
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(no_device_reason().empty());
  } else {
    EXPECT_EQ(no_device_reason(), "");
  }
  try {
    describe_device(n);
    FAIL() << "describe_device(" << n << ") should throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device " + std::to_string(n) + " does not exist"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(set_device(-1), ConfigError);
  EXPECT_THROW(memory_info(n), ConfigError);
}

TEST(CudaErrors, MapToTypedErrorsWithTheOperationAndCudasText) {
  EXPECT_EQ(error_kind(kMemoryAllocation), ErrorKind::kOutOfMemory);
  EXPECT_EQ(error_kind(kInsufficientDriver), ErrorKind::kConfig);
  EXPECT_EQ(error_kind(kNoDevice), ErrorKind::kConfig);
  EXPECT_EQ(error_kind(kInvalidValue), ErrorKind::kInternal);
  EXPECT_EQ(error_kind(kIllegalAddress), ErrorKind::kInternal);
  EXPECT_EQ(error_message(kMemoryAllocation, "cudaMalloc of 1.50 GiB"),
            "cudaMalloc of 1.50 GiB: out of memory (cudaErrorMemoryAllocation)");
  try {
    throw_error(kMemoryAllocation, "cudaMalloc of 1.50 GiB");
  } catch (const OutOfMemoryError& e) {
    EXPECT_STREQ(e.what(), "cudaMalloc of 1.50 GiB: out of memory (cudaErrorMemoryAllocation)");
  }
  EXPECT_THROW(throw_error(kNoDevice, "cudaSetDevice(0)"), ConfigError);
  EXPECT_THROW(throw_error(kIllegalAddress, "cudaStreamSynchronize"), InternalError);
}

}  // namespace
}  // namespace pstar::cuda
