#include "pstar/memory/host_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::memory {
namespace {

// The pool accounts for the bytes asked, not the whole pages mapped.
size_t mapped_size(int64_t bytes) {
  static const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (static_cast<size_t>(bytes) + page - 1) / page * page;
}

}  // namespace

void* MappedPages::allocate(int64_t bytes, int64_t reserved_bytes) {
  void* p =
      mmap(nullptr, mapped_size(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  PSTAR_CHECK(p != MAP_FAILED, OutOfMemoryError, "cannot allocate ", format_bytes(bytes),
              " of host memory for a chunk payload (the pool holds ", format_bytes(reserved_bytes),
              " already); lower engine.host_memory or free memory");
  // Note [huge pages for payloads]. Only advice: without transparent huge pages (or with them
  // off) the mapping stays as it is.
  if (bytes >= kHugePageBytes) (void)madvise(p, mapped_size(bytes), MADV_HUGEPAGE);
  return p;
}

void MappedPages::release(void* p, int64_t bytes) noexcept { (void)munmap(p, mapped_size(bytes)); }

template class PoolBlock<MappedPages>;
template class ExactSizePool<MappedPages>;

}  // namespace pstar::memory
