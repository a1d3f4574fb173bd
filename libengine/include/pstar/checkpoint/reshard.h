// A checkpoint of one number of ranks laid out for another (Note [reshard] in reshard.cpp): what
// `pstar merge-ckpt --reshard` writes and what `pstar train --resume` on another number of ranks
// loads.
#pragma once

#include <cstdint>

#include "pstar/checkpoint/index.h"
#include "pstar/checkpoint/store.h"

namespace pstar::config {
struct TrainConfig;
}

namespace pstar::checkpoint {

// What rank `rank` of `world` holds in the checkpoint `index` resharded for `world` ranks, the
// chunks laid out as `config` (a GPT) lays them out (Note [reshard] in reshard.cpp): its parameters
// with their Adam state, read from the files that hold them, and the run state. The tensors
// `--reshard` writes to that rank's file; `pstar train --resume` on another number of ranks
// loads them straight away. ConfigError when `config` has fewer chunks than `world` ranks or
// describes no GPT; FormatError when a file lacks what a rank needs.
TensorList resharded_rank_tensors(const CheckpointIndex& index, const config::TrainConfig& config,
                                  int64_t world, int64_t rank);

}  // namespace pstar::checkpoint
