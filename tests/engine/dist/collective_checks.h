// The collectives' checks, run by every communicator's test (the Gloo rings between processes,
// the thread double of thread_ranks.h): each result against values computed here independently,
// in double precision, for any number of ranks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "pstar/dist/communicator.h"

namespace pstar::testing {

inline uint8_t collective_pattern(int64_t part, int64_t i) {
  return static_cast<uint8_t>((part * 7 + i) % 251);
}
inline float collective_contribution(int64_t rank, int64_t part, int64_t i) {
  return static_cast<float>((rank + 1) * 0.5 + part * 0.25 + static_cast<double>(i) * 1e-3);
}

// Runs every collective once on this rank; returns whether all results held, and says on stderr
// what did not.
inline bool check_collectives(dist::Communicator& comm) {
  constexpr int64_t kBytes = 1001, kNumel = 1000;
  const int64_t n = comm.world_size();
  bool ok = true;
  auto check = [&](bool cond, const std::string& what) {
    if (!cond)
      std::fprintf(stderr, "rank %lld: %s\n", static_cast<long long>(comm.rank()), what.c_str());
    ok = ok && cond;
  };
  // All-gather: every part arrives intact, this rank's included.
  std::vector<std::vector<uint8_t>> parts(static_cast<size_t>(n), std::vector<uint8_t>(kBytes, 0));
  for (int64_t i = 0; i < kBytes; ++i)
    parts[static_cast<size_t>(comm.rank())][static_cast<size_t>(i)] =
        collective_pattern(comm.rank(), i);
  std::vector<void*> ptrs;
  for (auto& p : parts) ptrs.push_back(p.data());
  comm.all_gather(ptrs, kBytes);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < kBytes; ++i)
      if (parts[static_cast<size_t>(j)][static_cast<size_t>(i)] != collective_pattern(j, i)) {
        check(false, "all-gather: part " + std::to_string(j) + " byte " + std::to_string(i));
        j = n;
        break;
      }

  // Reduce-scatter: this rank's part summed over the ranks, against double sums.
  std::vector<float> out(kNumel, -1.0F);
  comm.reduce_scatter(
      kNumel,
      [&](int64_t part, float* acc) {
        for (int64_t i = 0; i < kNumel; ++i)
          acc[i] += collective_contribution(comm.rank(), part, i);
      },
      out.data());
  for (int64_t i = 0; i < kNumel; ++i) {
    double expected = 0;
    for (int64_t r = 0; r < n; ++r) expected += collective_contribution(r, comm.rank(), i);
    if (std::abs(out[static_cast<size_t>(i)] - expected) > 1e-6 * std::abs(expected)) {
      check(false, "reduce-scatter element " + std::to_string(i) + ": " +
                       std::to_string(out[static_cast<size_t>(i)]) + " vs " +
                       std::to_string(expected));
      break;
    }
  }

  // The flat reduce-scatter (Note [flat collectives]): the same sums, left in this rank's slot.
  std::vector<float> flat(static_cast<size_t>(n * kNumel));
  for (int64_t part = 0; part < n; ++part)
    for (int64_t i = 0; i < kNumel; ++i)
      flat[static_cast<size_t>(part * kNumel + i)] =
          collective_contribution(comm.rank(), part, i) * 2.0F;
  comm.reduce_scatter_flat(flat.data(), kNumel);
  for (int64_t i = 0; i < kNumel; ++i) {
    double expected = 0;
    for (int64_t r = 0; r < n; ++r) expected += 2.0 * collective_contribution(r, comm.rank(), i);
    const float got = flat[static_cast<size_t>(comm.rank() * kNumel + i)];
    if (std::abs(got - expected) > 1e-6 * std::abs(expected)) {
      check(false, "flat reduce-scatter element " + std::to_string(i) + ": " + std::to_string(got) +
                       " vs " + std::to_string(expected));
      break;
    }
  }

  check(comm.all_reduce_sum(static_cast<double>(comm.rank() + 1)) ==
            static_cast<double>(n * (n + 1) / 2),
        "all-reduce");
  std::vector<std::string> expected_names;
  for (int64_t r = 0; r < n; ++r) expected_names.push_back("rank-" + std::to_string(r));
  check(comm.exchange("name", "rank-" + std::to_string(comm.rank())) == expected_names, "exchange");
  comm.barrier();

  // Each rank sent N-1 parts per collective and one double in the all-reduce.
  const dist::CommStats stats = comm.take_stats();
  check(stats.bytes_sent == (n - 1) * kBytes + 2 * (n - 1) * kNumel * 4 + 8,
        "bytes sent " + std::to_string(stats.bytes_sent));
  check(comm.take_stats().bytes_sent == 0, "stats are reset when taken");
  return ok;
}

}  // namespace pstar::testing
