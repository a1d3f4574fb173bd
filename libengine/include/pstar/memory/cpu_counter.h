// Non-model memory on the emulated device, measured rather than guessed: a counting wrapper around
// LibTorch's CPU allocator sees every activation, gradient and temporary byte. Chunk payloads are
// allocated outside it (pstar/memory/buffer.h), so what it counts is exactly the non-model data.
#pragma once

#include <cstdint>

namespace pstar::memory {

class CpuAllocationCounter {
 public:
  // Installs the counting allocator on first use (process-wide, never removed: tensors allocated
  // through it may outlive any scope).
  static CpuAllocationCounter& instance();

  int64_t current_bytes() const;
  // The most bytes held at once since the last reset_peak(): sampling this at two moments cannot
  // miss a spike between them.
  int64_t peak_bytes() const;
  // Starts a new peak window at the current level; returns the old window's peak.
  int64_t reset_peak();

 private:
  CpuAllocationCounter();
};

}  // namespace pstar::memory
