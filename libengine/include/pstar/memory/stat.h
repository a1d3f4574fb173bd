// One shape for every memory counter (after c10's Stat): what is held now, the most held at once,
// and the running totals of what was added and taken away. Header-only and dependency-free, so
// that pstar_cuda (no LibTorch) counts its pinned pool with it too.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pstar::memory {

struct Stat {
  int64_t current = 0;    // bytes held now
  int64_t peak = 0;       // the most held at once since construction or reset_peak()
  int64_t allocated = 0;  // bytes ever added
  int64_t freed = 0;      // bytes ever taken away: allocated - freed == current

  void increase(int64_t bytes) {
    current += bytes;
    allocated += bytes;
    peak = std::max(peak, current);
  }
  void decrease(int64_t bytes) {
    current -= bytes;
    freed += bytes;
  }
  void reset_peak() { peak = current; }
};

}  // namespace pstar::memory
