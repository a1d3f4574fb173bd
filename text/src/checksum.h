// FNV-1a (64 bit): the fingerprints of tokenizer files and the keys of token caches. Not a
// cryptographic hash; it tells versions of files apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pstar::text {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;

inline void fnv1a(uint64_t& h, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
}

// A field of a checksum: its length first, so that fields cannot run into each other.
inline void fnv1a_field(uint64_t& h, std::string_view bytes) {
  const uint64_t size = bytes.size();
  fnv1a(h, &size, sizeof(size));
  fnv1a(h, bytes.data(), bytes.size());
}

}  // namespace pstar::text
