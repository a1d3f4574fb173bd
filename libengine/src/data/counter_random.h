// Random numbers as functions of a counter, for the samplers (batch_sampler.cpp, record_plan.cpp):
// what a step or an epoch draws depends on the seed and its indices only, never on what was drawn
// before, so every rank and every resume draws the same.
#pragma once

#include <cstdint>

namespace pstar::data {

// SplitMix64's finaliser: 64 well-mixed bits from any 64-bit input.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, n) from 64 random bits (multiply-shift; the bias is below 2^-40 for any n here).
inline uint64_t below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

}  // namespace pstar::data
