#include "pstar/cuda/error.h"

#include <cuda_runtime.h>

namespace pstar::cuda {

ErrorKind error_kind(int cuda_error) {
  switch (static_cast<cudaError_t>(cuda_error)) {
    case cudaErrorMemoryAllocation:
      return ErrorKind::kOutOfMemory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
      return ErrorKind::kConfig;
    default:
      // Everything else is a bug or a broken device; cudaError_t has too many values for a switch
      // without a default to be useful.
      return ErrorKind::kInternal;
  }
}

std::string error_message(int cuda_error, const std::string& operation) {
  const auto error = static_cast<cudaError_t>(cuda_error);
  return str_cat(operation, ": ", cudaGetErrorString(error), " (", cudaGetErrorName(error), ")");
}

void throw_error(int cuda_error, const std::string& operation) {
  // Clears a non-sticky error so that the next cudaGetLastError (a launch check) does not see it.
  (void)cudaGetLastError();
  const std::string message = error_message(cuda_error, operation);
  switch (error_kind(cuda_error)) {
    case ErrorKind::kOutOfMemory:
      throw OutOfMemoryError(message);
    case ErrorKind::kConfig:
      throw ConfigError(message);
    case ErrorKind::kIo:
    case ErrorKind::kFormat:
    case ErrorKind::kDist:
    case ErrorKind::kNumeric:
    case ErrorKind::kInternal:
      break;
  }
  throw InternalError(message);
}

}  // namespace pstar::cuda
