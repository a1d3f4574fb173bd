#!/usr/bin/env bash
# On a machine with a CUDA GPU: builds pstar's CUDA pieces on their own (cmake/cuda-standalone: no
# LibTorch or Debian packages needed), runs their tests (labels unit and gpu) and the kernel
# benchmark (docs/cuda.md). Fails if any GPU test was skipped, since here that means the device is
# not usable. Extra arguments go to the benchmark, e.g. scripts/gpu-check.sh --numel 67108864
#
# Environment: PSTAR_GTEST_SOURCE_DIR, a GoogleTest source tree when none is installed;
# BUILD_DIR (build/cuda-standalone).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/cuda-standalone}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
args=(-DCMAKE_CUDA_COMPILER="$nvcc")
if [ -n "${PSTAR_GTEST_SOURCE_DIR:-}" ]; then
  # GoogleTest 1.12 asks for CMake 3.5 policies, the oldest CMake 4 still accepts.
  args+=(-DPSTAR_GTEST_SOURCE_DIR="$PSTAR_GTEST_SOURCE_DIR" -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
echo "nvcc: $("$nvcc" --version | tail -n 1); c++: $(c++ --version | head -n 1); $(cmake --version | head -n 1)"
cmake -S cmake/cuda-standalone -B "$build" -G Ninja "${args[@]}"
start=$(date +%s)
cmake --build "$build"
echo "build: $(($(date +%s) - start)) s"
log=$(mktemp)
ctest --test-dir "$build" -L "unit|gpu" -j "$(nproc)" --output-on-failure 2>&1 | tee "$log"
if grep -q "(Skipped)" "$log"; then
  "$build/engine_cuda_tests" --gtest_filter=CudaRuntimeTest.DescribesTheDevice | grep -A1 Skipped || true
  echo "gpu-check: GPU tests were skipped: the device is not usable" >&2
  exit 1
fi
"$build/pstar-bench-adam-kernel" "$@"
