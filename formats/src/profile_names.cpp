// The names of the profile's enum codes. They need nothing of HDF5, so they are apart from the
// file's writer and reader (profile/) and in every build, with HDF5 or without.
#include "pstar/formats/profile.h"

namespace pstar::formats {

const char* to_string(ProfileStage stage) {
  switch (stage) {
    case ProfileStage::kForward:
      return "forward";
    case ProfileStage::kBackward:
      return "backward";
    case ProfileStage::kOptimizer:
      return "optimizer";
  }
  return "unknown";
}

const char* to_string(ChunkPlace place) {
  switch (place) {
    case ChunkPlace::kAbsent:
      return "absent";
    case ChunkPlace::kHost:
      return "host";
    case ChunkPlace::kDevice:
      return "device";
    case ChunkPlace::kNvme:
      return "nvme";
  }
  return "unknown";
}

const char* to_string(ChunkEventKind kind) {
  switch (kind) {
    case ChunkEventKind::kMoveH2D:
      return "move_h2d";
    case ChunkEventKind::kMoveD2H:
      return "move_d2h";
    case ChunkEventKind::kAllocate:
      return "allocate";
    case ChunkEventKind::kRelease:
      return "release";
    case ChunkEventKind::kAdamDevice:
      return "adam_device";
    case ChunkEventKind::kAdamHost:
      return "adam_host";
    case ChunkEventKind::kGather:
      return "gather";
    case ChunkEventKind::kReduce:
      return "reduce";
    case ChunkEventKind::kNvmeRead:
      return "nvme_read";
    case ChunkEventKind::kNvmeWrite:
      return "nvme_write";
  }
  return "unknown";
}

}  // namespace pstar::formats
