// Mapping CUDA runtime errors to pstar's typed errors. Every CUDA call in pstar_cuda goes through
// PSTAR_CUDA_CHECK (src/cuda/check.h), which ends here on failure.
//
// This header, like every header in pstar/cuda/, includes no CUDA header: code that uses pstar_cuda
// compiles without the CUDA toolkit. Error codes travel as int (the values of cudaError_t).
#pragma once

#include <string>

#include "pstar/base/error.h"

namespace pstar::cuda {

// The kind of pstar error a cudaError_t value becomes:
// - kOutOfMemory: cudaErrorMemoryAllocation (device or pinned host memory is exhausted);
// - kConfig: the machine cannot run this build, which the user can fix (no device, no or an old
//   driver, a device index that does not exist, a device this build has no kernels for, devices
//   in exclusive or prohibited mode);
// - kInternal: everything else (invalid arguments, launch failures, illegal addresses): a bug in
//   pstar or a broken device.
ErrorKind error_kind(int cuda_error);

// "<operation>: <cudaGetErrorString> (<cudaGetErrorName>)", e.g.
// "cudaMalloc of 1.50 GiB for a device arena: out of memory (cudaErrorMemoryAllocation)".
std::string error_message(int cuda_error, const std::string& operation);

// Throws the error of error_kind(cuda_error) with error_message's text. It first clears the
// runtime's last-error state (cudaGetLastError), so that a later launch check does not report a
// failure that was already thrown (an error that corrupts the context stays, as CUDA keeps it).
[[noreturn]] void throw_error(int cuda_error, const std::string& operation);

}  // namespace pstar::cuda
