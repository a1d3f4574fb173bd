// Every rank of a run must train the same config (private to src/train).
#pragma once

#include "pstar/dist/communicator.h"
#include "pstar/formats/config.h"

namespace pstar::train {

// Collective: ConfigError naming the first key where a rank's config differs from rank 0's, with
// both values.
void check_same_config(dist::Communicator& comm, const config::TrainConfig& config);

}  // namespace pstar::train
