// A fresh random name for a run: 16 hex digits from std::random_device. Checkpoint manifests record
// the trainer's; the NVMe tier names its run directory with one (Note [nvme run directory]).
#pragma once

#include <cstdio>
#include <random>
#include <string>

namespace pstar::core {

inline std::string random_id() {
  std::random_device random;
  char id[24];
  std::snprintf(id, sizeof id, "%08x%08x", random(), random());
  return id;
}

}  // namespace pstar::core
