// Helpers shared by the NVMe store's tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "pstar/nvme/aligned_buffer.h"
#include "pstar/nvme/store.h"

namespace pstar::nvme::testing {

// An aligned buffer of `bytes` random bytes from `seed`.
inline AlignedBuffer random_buffer(int64_t bytes, uint32_t seed) {
  AlignedBuffer buf(bytes);
  std::mt19937 rng(seed);
  auto* p = buf.as<uint8_t>();
  for (int64_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(rng());
  return buf;
}

inline bool same_bytes(const AlignedBuffer& a, const AlignedBuffer& b, int64_t bytes) {
  return std::memcmp(a.data(), b.data(), static_cast<size_t>(bytes)) == 0;
}

// The backends every behaviour is tested on; io_uring skips (with the reason) where refused.
class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    std::string why;
    if (GetParam() == BackendKind::kIoUring && !io_uring_available(&why))
      GTEST_SKIP() << "io_uring is refused on this machine (" << why
                   << "); the pread/pwrite backend runs the same test";
  }
  StoreOptions options() const {
    StoreOptions o;
    o.backend = GetParam();
    return o;
  }
};

inline std::string backend_param_name(const ::testing::TestParamInfo<BackendKind>& info) {
  return info.param == BackendKind::kIoUring ? "IoUring" : "Threads";
}

}  // namespace pstar::nvme::testing
