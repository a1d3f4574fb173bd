// Caches that every rank would make the same (a text's token cache, a JSON Lines file's record
// file): made by rank 0 alone, then found by the others (Note [token cache on several ranks] in
// token_source.cpp). Private to src/data.
#pragma once

#include <exception>
#include <string>

#include "pstar/base/error.h"
#include "pstar/dist/communicator.h"

namespace pstar::data {

// `make()` on rank 0 first; the others wait for it in a collective (which also tells them whether
// it failed, so that they stop with it rather than wait for a rank that is gone) and then call
// `make()` themselves, which finds what rank 0 made. `failed` is the DistError's message on the
// other ranks when rank 0 failed ("data.text /x.txt: rank 0 could not make its token cache").
template <typename Make>
auto rank0_first(dist::Communicator* comm, const std::string& failed, Make make)
    -> decltype(make()) {
  if (comm == nullptr || comm->world_size() == 1) return make();
  std::exception_ptr failure;
  decltype(make()) made{};
  if (comm->rank() == 0) {
    try {
      made = make();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const bool any_failed = comm->all_reduce_sum(failure != nullptr ? 1.0 : 0.0) > 0;
  if (failure != nullptr) std::rethrow_exception(failure);
  PSTAR_CHECK(!any_failed, DistError, failed, " (its error says why)");
  if (comm->rank() == 0) return made;
  return make();
}

}  // namespace pstar::data
