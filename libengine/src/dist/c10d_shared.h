// What the two c10d communicators share (Note [device collectives] in pstar/dist/communicator.h):
// the run's rendezvous store, which the NCCL group joins through, and how a c10d failure reads in
// pstar's errors. Private to dist: only the communicators' own files include c10d.
#pragma once

#include <exception>
#include <string>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "pstar/dist/communicator.h"

namespace pstar::dist {

// The TCPStore behind `comm` when connect_gloo made it; null for any other communicator.
c10::intrusive_ptr<c10d::Store> gloo_store(Communicator& comm);

// A c10d exception's message without LibTorch's C++ backtrace, for a DistError.
inline std::string c10d_what(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace pstar::dist
