#include "pstar/nvme/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "channel.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/log.h"
#include "pstar/formats/file_guard.h"
#include "pstar/nvme/aligned_buffer.h"
#include "run_dir.h"

namespace pstar::nvme {

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kIoUring:
      return "io_uring";
    case BackendKind::kThreads:
      return "threads";
  }
  return "?";
}

namespace detail {
namespace {

// Note [nvme slot checksum]
// The slot CRCs guard bytes between one write and its reads in the same process; nothing else ever
// reads them. So the fastest CRC at hand is used: CRC-32C through SSE 4.2's crc32 instruction
// (about 3.5x zlib's CRC-32 on the development machines: 4.9 against 1.4 GB/s), zlib's CRC-32 on
// CPUs without it. The caller's thread computes it, so its speed bounds a store with checksums.
#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const void* data, int64_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t crc = 0xFFFFFFFFu;
  for (; bytes >= 8; bytes -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = __builtin_ia32_crc32di(crc, word);
  }
  auto c = static_cast<uint32_t>(crc);
  for (; bytes > 0; --bytes, ++p) c = __builtin_ia32_crc32qi(c, *p);
  return c ^ 0xFFFFFFFFu;
}
#endif

uint32_t slot_checksum(const void* data, int64_t bytes) {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return crc32c_sse42(data, bytes);
#endif
  return static_cast<uint32_t>(
      ::crc32_z(0L, static_cast<const Bytef*>(data), static_cast<z_size_t>(bytes)));
}

// Free bytes for an unprivileged user; -1 where unknown (statvfs failed, or a file system that
// reports no size at all, as ramfs does).
int64_t free_bytes(const std::string& path) {
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0 || vfs.f_blocks == 0) return -1;
  return static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
}

// What direct I/O on this file needs: statx's alignment where the kernel reports it (6.1 and
// later), never less than kDefaultAlignment.
int64_t direct_io_alignment(int fd) {
  int64_t alignment = kDefaultAlignment;
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
      (sx.stx_mask & STATX_DIOALIGN) != 0) {
    alignment = std::max<int64_t>(alignment, sx.stx_dio_offset_align);
    alignment = std::max<int64_t>(alignment, sx.stx_dio_mem_align);
  }
#else
  (void)fd;
#endif
  return alignment;
}

struct SlotState {
  int64_t bytes = -1;  // what the last write put there; -1: nothing trustworthy
  uint32_t crc = 0;
  std::shared_ptr<Job> writing, reading;  // the last of each, to check that they do not overlap
};

}  // namespace

class StoreImpl {
 public:
  StoreImpl(const std::string& nvme_path, const std::string& run_id, int64_t slot_bytes,
            int64_t num_slots, const StoreOptions& options);
  ~StoreImpl();

  Ticket submit(Op op, int64_t slot, char* buf, int64_t bytes);
  void wait(const Ticket& ticket);

  std::string nvme_path_;
  RunDir dir_;
  std::string file_;
  formats::UniqueFd fd_;
  StoreOptions options_;
  int64_t slot_bytes_, num_slots_, alignment_ = kDefaultAlignment, stride_ = 0;
  bool direct_ = false;
  BackendKind backend_ = BackendKind::kThreads;
  std::string reason_;
  Completion completion_;
  std::vector<SlotState> slots_;  // under completion_.mutex
  IoStats stats_;                 // under completion_.mutex
  // Declared last: shut down (drained) first, while the file is still open.
  std::unique_ptr<Channel> reads_, writes_;

 private:
  void open_file();
  void reserve_space();
  void start_backend();
};

StoreImpl::StoreImpl(const std::string& nvme_path, const std::string& run_id, int64_t slot_bytes,
                     int64_t num_slots, const StoreOptions& options)
    : nvme_path_(nvme_path),
      dir_(nvme_path, run_id),
      options_(options),
      slot_bytes_(slot_bytes),
      num_slots_(num_slots) {
  file_ = dir_.file("slots");
  open_file();
  reserve_space();
  slots_.resize(static_cast<size_t>(num_slots_));
  start_backend();
  log::info("nvme: ", file_, ": ", reason_, "; ", num_slots_, " slots of ",
            format_bytes(slot_bytes_), " (", format_bytes(stride_ * num_slots_), ")");
}

void StoreImpl::open_file() {
  const int base = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  direct_ = options_.direct;
  int fd = formats::open_retrying(file_.c_str(), base | (direct_ ? O_DIRECT : 0), 0600);
  if (fd < 0 && direct_ && errno == EINVAL) {
    // tmpfs before Linux 6.6, and some network and FUSE file systems, refuse O_DIRECT.
    direct_ = false;
    reason_ = "O_DIRECT refused by the file system (EINVAL)";
    ::unlink(file_.c_str());
    fd = formats::open_retrying(file_.c_str(), base, 0600);
  } else if (!direct_) {
    reason_ = "O_DIRECT turned off by the options";
  }
  PSTAR_CHECK(fd >= 0, IoError, "cannot create the NVMe store file ", file_, ": ",
              std::strerror(errno));
  fd_ = formats::UniqueFd(fd);
  if (direct_) alignment_ = direct_io_alignment(fd);
  PSTAR_CHECK(options_.request_bytes % alignment_ == 0, ConfigError, "NVMe request size ",
              options_.request_bytes,
              " is not a multiple of the file system's direct-I/O alignment ", alignment_, " for ",
              file_);
}

void StoreImpl::reserve_space() {
  stride_ = round_up(slot_bytes_, alignment_);
  PSTAR_CHECK(stride_ <= (int64_t{1} << 62) / num_slots_, ConfigError, "NVMe store of ", num_slots_,
              " slots of ", slot_bytes_, " bytes is too large");
  const int64_t needed = stride_ * num_slots_;
  const int64_t free = free_bytes(nvme_path_);
  PSTAR_CHECK(free < 0 || needed <= free, IoError, "not enough free space in nvme_path ",
              nvme_path_, ": the NVMe store needs ", format_bytes(needed), " (", needed,
              " bytes), ", format_bytes(free), " (", free, " bytes) are free");
  // Note [nvme slot file]: the whole file is allocated now, so ENOSPC comes here or not at all.
  if (::fallocate(fd_.get(), 0, 0, needed) == 0) return;
  const int err = errno;
  if (err == EOPNOTSUPP) {
    PSTAR_CHECK(::ftruncate(fd_.get(), needed) == 0, IoError, "cannot size ", file_, " to ", needed,
                " bytes: ", std::strerror(errno));
    log::warn("nvme: ", file_,
              ": the file system cannot preallocate (fallocate: EOPNOTSUPP); "
              "a full disk will show as ENOSPC during the run");
    return;
  }
  PSTAR_THROW(IoError, "cannot allocate ", format_bytes(needed), " (", needed,
              " bytes) for the NVMe store file ", file_, ": ", std::strerror(err),
              err == ENOSPC ? str_cat("; ", format_bytes(free_bytes(nvme_path_)), " are free")
                            : std::string());
}

void StoreImpl::start_backend() {
  ChannelConfig config;
  config.fd = fd_.get();
  config.path = file_;
  config.queue_depth = options_.queue_depth;
  config.request_bytes = options_.request_bytes;
  config.fault = options_.fault;
  config.completion = &completion_;
  ChannelConfig read_config = config, write_config = config;
  read_config.op = Op::kRead;
  write_config.op = Op::kWrite;

  std::string refused;
  const bool try_uring = options_.backend == BackendKind::kIoUring ||
                         (options_.backend == BackendKind::kAuto && direct_);
  if (try_uring) {
    reads_ = make_uring_channel(read_config, &refused);
    if (reads_) writes_ = make_uring_channel(write_config, &refused);
    if (!writes_) reads_.reset();
    PSTAR_CHECK(reads_ || options_.backend != BackendKind::kIoUring, ConfigError,
                "the NVMe store was asked for io_uring, which is refused here (", refused,
                "); use the automatic choice, which falls back to pread/pwrite threads");
  }
  const std::string direct_text = direct_ ? "O_DIRECT" : "buffered (no O_DIRECT)";
  const std::string depth = str_cat(options_.queue_depth, " per direction, ",
                                    format_bytes(options_.request_bytes), " requests");
  if (reads_) {
    backend_ = BackendKind::kIoUring;
    reason_ = str_cat("io_uring, ", direct_text, ", queue depth ", depth,
                      reason_.empty() ? "" : " (", reason_, reason_.empty() ? "" : ")");
    return;
  }
  backend_ = BackendKind::kThreads;
  std::string why = options_.backend == BackendKind::kThreads ? "forced by the options"
                    : !refused.empty() ? str_cat("io_uring refused: ", refused)
                                       : reason_;
  if (!refused.empty() && !reason_.empty()) why += "; " + reason_;
  reads_ = make_thread_channel(read_config);
  writes_ = make_thread_channel(write_config);
  reason_ = str_cat("pread/pwrite threads, ", direct_text, ", ", depth, " (", why, ")");
}

StoreImpl::~StoreImpl() {
  // Requests in flight write into callers' buffers and read from the file: finish them first.
  if (writes_) writes_->shut_down();
  if (reads_) reads_->shut_down();
}

Ticket StoreImpl::submit(Op op, int64_t slot, char* buf, int64_t bytes) {
  PSTAR_INTERNAL_ASSERT(slot >= 0 && slot < num_slots_, "NVMe slot ", slot, " of ", num_slots_);
  PSTAR_INTERNAL_ASSERT(bytes > 0 && bytes <= slot_bytes_, "NVMe transfer of ", bytes,
                        " bytes into slots of ", slot_bytes_);
  PSTAR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(buf) % static_cast<uintptr_t>(alignment_) == 0,
                        "NVMe buffer not aligned to ", alignment_, " bytes");
  // Note [nvme slot file]: the file stays usable through its descriptor when someone deletes the
  // directory, but the slots would be lost at exit and the space hidden from the user: stop.
  struct stat st {};
  PSTAR_CHECK(::fstat(fd_.get(), &st) == 0, IoError, "cannot stat the NVMe store file ", file_,
              ": ", std::strerror(errno));
  PSTAR_CHECK(st.st_nlink > 0, IoError, "the NVMe store file ", file_,
              " was removed while the run used it (was ", dir_.path(), " deleted?)");

  auto job = std::make_shared<Job>();
  job->op = op;
  job->slot = slot;
  job->buf = buf;
  job->offset = slot * stride_;
  job->bytes = round_up(bytes, alignment_);
  job->data_bytes = bytes;
  if (op == Op::kWrite && options_.checksums) job->crc = slot_checksum(buf, bytes);
  {
    std::lock_guard<std::mutex> lock(completion_.mutex);
    SlotState& s = slots_[static_cast<size_t>(slot)];
    const bool writing = s.writing && !s.writing->done;
    const bool reading = s.reading && !s.reading->done;
    if (op == Op::kWrite) {
      PSTAR_INTERNAL_ASSERT(!writing && !reading, "NVMe slot ", slot,
                            " written while an operation on it is in flight");
      s.bytes = bytes;
      s.crc = job->crc;
      s.writing = job;
    } else {
      PSTAR_INTERNAL_ASSERT(!writing, "NVMe slot ", slot, " read while a write to it is in flight");
      PSTAR_INTERNAL_ASSERT(s.bytes == bytes, "NVMe slot ", slot, " read for ", bytes,
                            " bytes, but its last write held ", s.bytes);
      job->crc = s.crc;
      s.reading = job;
    }
  }
  (op == Op::kRead ? reads_ : writes_)->enqueue(job);
  Ticket ticket;
  ticket.job_ = std::move(job);
  return ticket;
}

void StoreImpl::wait(const Ticket& ticket) {
  PSTAR_INTERNAL_ASSERT(ticket.job_ != nullptr, "wait on an empty NVMe ticket");
  Job& job = *ticket.job_;
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(completion_.mutex);
  completion_.cv.wait(lock, [&] { return job.done; });
  PSTAR_INTERNAL_ASSERT(!job.waited, "an NVMe ticket waited on twice");
  job.waited = true;
  stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const char* verb = job.op == Op::kRead ? "read" : "write";
  if (job.error != 0) {
    if (job.op == Op::kWrite) slots_[static_cast<size_t>(job.slot)].bytes = -1;
    PSTAR_THROW(IoError, "NVMe store ", file_, ": ", verb, " of slot ", job.slot, " (",
                format_bytes(job.data_bytes), " at offset ", job.offset,
                ") failed: ", job.error_text);
  }
  if (job.op == Op::kWrite) {
    stats_.write_bytes += job.data_bytes;
    ++stats_.writes;
    return;
  }
  stats_.read_bytes += job.data_bytes;
  ++stats_.reads;
  lock.unlock();
  if (!options_.checksums) return;
  const uint32_t crc = slot_checksum(job.buf, job.data_bytes);
  PSTAR_CHECK(crc == job.crc, IoError, "NVMe store ", file_, ": slot ", job.slot,
              " read back with checksum ", crc, " but was written with ", job.crc,
              ": the data on disk is damaged (a torn write, a failing device, or another writer)");
}

}  // namespace detail

NvmeStore::NvmeStore(std::unique_ptr<detail::StoreImpl> impl) : impl_(std::move(impl)) {}
NvmeStore::~NvmeStore() = default;

int64_t free_space(const std::string& nvme_path) {
  detail::check_nvme_path(nvme_path);
  return detail::free_bytes(nvme_path);
}

std::unique_ptr<NvmeStore> NvmeStore::open(const std::string& nvme_path, const std::string& run_id,
                                           int64_t slot_bytes, int64_t num_slots,
                                           const StoreOptions& options) {
  PSTAR_CHECK(slot_bytes > 0 && num_slots > 0, ConfigError, "an NVMe store needs slots: got ",
              num_slots, " slots of ", slot_bytes, " bytes");
  PSTAR_CHECK(options.queue_depth >= 1 && options.queue_depth <= 4096, ConfigError,
              "NVMe queue depth ", options.queue_depth, " is not in 1..4096");
  PSTAR_CHECK(options.request_bytes > 0 && options.request_bytes % kDefaultAlignment == 0 &&
                  options.request_bytes <= (int64_t{1} << 30),
              ConfigError, "NVMe request size ", options.request_bytes,
              " must be a multiple of 4096 of at most 1 GiB");
  return std::unique_ptr<NvmeStore>(new NvmeStore(
      std::make_unique<detail::StoreImpl>(nvme_path, run_id, slot_bytes, num_slots, options)));
}

Ticket NvmeStore::write(int64_t slot, const void* buf, int64_t bytes) {
  // The buffer is only read from for a write; Job holds one pointer type for both directions.
  return impl_->submit(detail::Op::kWrite, slot, static_cast<char*>(const_cast<void*>(buf)), bytes);
}
Ticket NvmeStore::read(int64_t slot, void* buf, int64_t bytes) {
  return impl_->submit(detail::Op::kRead, slot, static_cast<char*>(buf), bytes);
}
void NvmeStore::wait(const Ticket& ticket) { impl_->wait(ticket); }

BackendKind NvmeStore::backend() const { return impl_->backend_; }
bool NvmeStore::direct_io() const { return impl_->direct_; }
const std::string& NvmeStore::backend_reason() const { return impl_->reason_; }
const std::string& NvmeStore::directory() const { return impl_->dir_.path(); }
const std::string& NvmeStore::file_path() const { return impl_->file_; }
int64_t NvmeStore::slot_bytes() const { return impl_->slot_bytes_; }
int64_t NvmeStore::num_slots() const { return impl_->num_slots_; }
int64_t NvmeStore::alignment() const { return impl_->alignment_; }
IoStats NvmeStore::stats() const {
  std::lock_guard<std::mutex> lock(impl_->completion_.mutex);
  return impl_->stats_;
}

}  // namespace pstar::nvme
