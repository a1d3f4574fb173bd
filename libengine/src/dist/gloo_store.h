// The rendezvous store of the run's Gloo communicator, for the NCCL group that joins the same ranks
// (Note [device collectives] in pstar/dist/communicator.h). Private to dist: it is the only header
// that names a c10d type outside the communicators' own files.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "pstar/dist/communicator.h"

namespace pstar::dist {

// The TCPStore behind `comm` when connect_gloo made it; null for any other communicator.
c10::intrusive_ptr<c10d::Store> gloo_store(Communicator& comm);

}  // namespace pstar::dist
