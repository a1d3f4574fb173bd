// ZeRO-style ownership of chunks across data-parallel ranks (Note [chunk layout]): chunks are
// numbered in order of construction; chunk k belongs to communication group k / N and is owned by
// rank k % N, which alone keeps its fp32 master, momentum and variance. World size 1 takes the
// same path: rank 0 owns every chunk.
#pragma once

#include <cstdint>

namespace pstar::chunk {

struct Sharding {
  int64_t rank = 0;
  int64_t world_size = 1;

  int64_t group_of(int64_t chunk) const { return chunk / world_size; }
  int64_t owner_of(int64_t chunk) const { return chunk % world_size; }
  bool owns(int64_t chunk) const { return owner_of(chunk) == rank; }
  // Chunks a group spans: every rank contributes one, so a group is world_size chunks.
  int64_t first_of_group(int64_t group) const { return group * world_size; }
};

}  // namespace pstar::chunk
