#include "pstar/memory/buffer.h"

#include <cstdlib>
#include <cstring>

#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::memory {

void Buffer::Free::operator()(void* p) const { std::free(p); }

Buffer::Buffer(int64_t bytes) : bytes_(bytes) {
  PSTAR_INTERNAL_ASSERT(bytes > 0);
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  PSTAR_CHECK(p != nullptr, OutOfMemoryError, "cannot allocate ", format_bytes(bytes),
              " of host memory for a chunk; lower engine.host_memory or free memory");
  std::memset(p, 0, rounded);
  data_.reset(p);
}

}  // namespace pstar::memory
