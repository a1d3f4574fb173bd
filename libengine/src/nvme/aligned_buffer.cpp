#include "pstar/nvme/aligned_buffer.h"

#include <cstdlib>

#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::nvme {

AlignedBuffer::AlignedBuffer(int64_t bytes, int64_t alignment) {
  PSTAR_INTERNAL_ASSERT(bytes > 0 && alignment > 0 && (alignment & (alignment - 1)) == 0,
                        "an aligned buffer of ", bytes, " bytes aligned to ", alignment);
  const int64_t capacity = round_up(bytes, alignment);
  void* p = std::aligned_alloc(static_cast<size_t>(alignment), static_cast<size_t>(capacity));
  PSTAR_CHECK(p != nullptr, OutOfMemoryError, "cannot allocate ", format_bytes(capacity),
              " of aligned host memory for NVMe transfers");
  data_.reset(p);
  bytes_ = bytes;
  capacity_ = capacity;
  alignment_ = alignment;
}

}  // namespace pstar::nvme
