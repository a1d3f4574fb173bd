// NvmeStore: a file of fixed-size slots on a local disk, written and read whole and asynchronously,
// for the third tier of issue 26 (whole chunks' optimizer payloads between host memory and disk).
// Pure C++ and liburing: the module links no LibTorch (README.md).
//
// Note [nvme slot file]
// One preallocated file holds every slot at a fixed offset (slot * stride, the stride being the
// slot size rounded up to the alignment), rather than one file per chunk: fallocate reserves all
// of the space at open, so on file systems that allocate in place (ext4, XFS) a run that starts
// cannot meet ENOSPC half-way through a step, and the free-space check at open is exact; the hot
// path makes no metadata calls (no create, unlink or extent allocation per move); and one file
// descriptor serves both io_uring rings. Its cost: the whole size is held from open to close, even
// for slots not yet written, which is what the plan counts anyway.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace pstar::nvme {

namespace detail {
struct Job;
class StoreImpl;
}  // namespace detail

enum class BackendKind {
  kAuto,     // io_uring with O_DIRECT where both work, else kThreads (one log line says why)
  kIoUring,  // io_uring or an error
  kThreads,  // pread/pwrite from a small thread pool per direction
};
const char* backend_name(BackendKind kind);

// The bytes free for an unprivileged user in `nvme_path` (-1 where the file system does not say);
// IoError naming it when it is missing or not a directory. The start-up fit plans with it.
int64_t free_space(const std::string& nvme_path);

// Whether io_uring works in this process (some container runtimes refuse io_uring_setup with
// EPERM, older kernels with ENOSYS); `why` receives the reason when it does not.
bool io_uring_available(std::string* why);

// Test-only seam at the I/O layer: one request of one direction fails with an errno, or transfers
// part of its bytes and then finds the end of the file (a short read or write).
struct FaultInjection {
  enum class Op { kNone, kRead, kWrite };
  Op op = Op::kNone;
  int64_t request = 0;      // which request of that direction, 0-based, counted from open
  int error = 0;            // the errno it fails with; 0: it is short
  int64_t short_bytes = 0;  // with error 0: the bytes it transfers before the end of the file
};

struct StoreOptions {
  BackendKind backend = BackendKind::kAuto;
  bool direct = true;               // O_DIRECT where the file system takes it
  int queue_depth = 8;              // requests in flight per direction (threads, for kThreads)
  int64_t request_bytes = 1 << 20;  // a slot moves as requests of this size (a multiple of 4096)
  bool checksums = true;            // a CRC per slot write, checked when the slot is read
  FaultInjection fault;
};

// Bytes moved by completed operations, and the time callers spent blocked in wait().
struct IoStats {
  int64_t read_bytes = 0, write_bytes = 0;
  int64_t reads = 0, writes = 0;
  double wait_s = 0;
};

// An operation in flight; wait() on it once. Copyable; holds the operation alive.
class Ticket {
 public:
  Ticket() = default;
  bool valid() const { return job_ != nullptr; }

 private:
  friend class detail::StoreImpl;
  std::shared_ptr<detail::Job> job_;
};

class NvmeStore {
 public:
  // Creates <nvme_path>/pstar-<run_id>/ (removing stale pstar-* directories of dead processes
  // there first, Note [nvme run directory] in run_dir.h) and a file of `num_slots` slots of
  // `slot_bytes` each in it. IoError naming the path when nvme_path is missing or unwritable, when
  // the disk has less free space than the slots need (both figures in the message), or when a
  // live process owns the same run directory; ConfigError for impossible options or sizes.
  static std::unique_ptr<NvmeStore> open(const std::string& nvme_path, const std::string& run_id,
                                         int64_t slot_bytes, int64_t num_slots,
                                         const StoreOptions& options = {});
  // Drains every operation in flight (queued ones are cancelled), then removes the directory.
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Queue a write of `bytes` (<= slot_bytes()) from `buf` into `slot`, or a read of the slot's
  // last written `bytes` into `buf`. `buf` must be aligned to alignment() and hold
  // round_up(bytes, alignment()) (an AlignedBuffer of `bytes` does), and must stay untouched until
  // wait(). Reads and writes go through separate queues, so a read is never stuck behind
  // write-back; a slot must not be read and written at once. IoError at once when the store's file
  // was removed.
  Ticket write(int64_t slot, const void* buf, int64_t bytes);
  Ticket read(int64_t slot, void* buf, int64_t bytes);
  // Blocks until the operation is complete; IoError naming the file, slot and cause when it
  // failed (all of its requests in flight are finished first) or when a read's checksum differs
  // from the one its write recorded.
  void wait(const Ticket& ticket);

  BackendKind backend() const;                // kIoUring or kThreads: what runs
  bool direct_io() const;                     // whether the file is open with O_DIRECT
  const std::string& backend_reason() const;  // the log line's reason
  const std::string& directory() const;
  const std::string& file_path() const;
  int64_t slot_bytes() const;
  int64_t num_slots() const;
  int64_t alignment() const;
  IoStats stats() const;

 private:
  explicit NvmeStore(std::unique_ptr<detail::StoreImpl> impl);
  std::unique_ptr<detail::StoreImpl> impl_;
};

}  // namespace pstar::nvme
