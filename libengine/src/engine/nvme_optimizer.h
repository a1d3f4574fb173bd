// The chunk engine's NVMe tier (Note [nvme tier] in engine/chunked_engine.h): the optimizer
// payloads (fp32 master where there is one, momentum, variance) of the chunks the start-up fit put
// on NVMe, one slot of an nvme::NvmeStore each, staged through a fixed pool of host buffers for
// host Adam, the checkpoint and start-up. It decides no placement and knows nothing of tensors:
// it is told which chunks it holds and in what order their Adam comes. Private to the chunk engine.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pstar/nvme/aligned_buffer.h"
#include "pstar/nvme/store.h"

namespace pstar::engine {

// A staged chunk's optimizer payloads in its staging buffer.
struct StagedOptimizer {
  float* master = nullptr;  // null in fp32 training (the param payload is the master)
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  double wait_s = 0;  // spent waiting for the read (0 when it had landed ahead)
};

// Cumulative I/O of the tier: bytes of completed reads and writes, the time the staging thread
// spent blocked on the disk.
struct NvmeFigures {
  int64_t read_bytes = 0, write_bytes = 0;
  double wait_s = 0;
};

// Note [nvme staging]
// The pool has `buffers` (kNvmeStagingChunks, or fewer when fewer chunks are on NVMe) buffers of
// one chunk's optimizer payloads each, allocated once. A buffer is free, reading chunk k, clean
// (it holds k's bytes, the slot has them too), in use (Adam or the host reads or changes k through
// it) or writing k back. At most one buffer holds a chunk, and a chunk not in a buffer has its
// latest bytes in its slot: a buffer is reused only after its write has landed. So a read is
// never needed for a chunk still held (it is taken as it is) and a slot is never read while
// written.
// Read-ahead follows the order Adam will take: the chunks announced (queued) and not yet taken,
// then, once a whole round of updates has been seen, the rest of the last round's order (the next
// step's Adam takes the same order unless early updates change it; a wrong guess costs a read, not
// a number). Reads ahead start when a chunk is taken and when one is given back; giving one back
// writes it behind, and may wait for the oldest write to land to free a buffer for the next read.
// Threads: acquire, release and flush run on one thread at a time (the Adam worker, or the
// training thread while no Adam is queued: start-up, checkpoints, a restored step); a mutex makes
// a broken contract a wait rather than a race. announce() may come from the training thread while
// the worker stages.
class NvmeOptimizer {
 public:
  enum class Use {
    kAdam,        // an update: counts towards the round that read-ahead learns the order from
    kHostAccess,  // the checkpoint, a parameter load, a skipped step's restore
    kFresh,       // a new chunk at start-up: zeroed, never read
  };

  // `chunk_size` elements per payload; `has_master`: three fp32 payloads per chunk, else two.
  NvmeOptimizer(std::unique_ptr<nvme::NvmeStore> store, int64_t chunk_size, bool has_master,
                int64_t buffers);
  ~NvmeOptimizer();
  NvmeOptimizer(const NvmeOptimizer&) = delete;
  NvmeOptimizer& operator=(const NvmeOptimizer&) = delete;

  // Gives chunk k the next slot.
  void add_chunk(int64_t k);
  bool holds(int64_t k) const { return slot_of_.count(k) != 0; }
  int64_t num_chunks() const { return static_cast<int64_t>(slot_of_.size()); }
  // Host bytes of the staging pool (what the host budget counts for it).
  int64_t pool_bytes() const;
  int64_t payload_bytes() const { return payload_bytes_; }
  const nvme::NvmeStore& store() const { return *store_; }

  // Chunk k's update is queued: read-ahead may start on it.
  void announce(int64_t k);
  // Chunk k's payloads in a buffer, after its read (kFresh: zeroed); the buffer is k's until
  // release(). IoError naming the file and slot when the read failed or its checksum differs.
  StagedOptimizer acquire(int64_t k, Use use);
  // `dirty`: the payloads changed and are written back behind.
  void release(int64_t k, bool dirty);
  // Every write has landed (and every read ahead too).
  void flush();
  // The I/O completed since the last call (a step's figures).
  NvmeFigures take_figures();

 private:
  enum class State : uint8_t { kFree, kReading, kClean, kInUse, kWriting };
  struct Buffer {
    nvme::AlignedBuffer memory;
    int64_t chunk = -1;
    State state = State::kFree;
    nvme::Ticket ticket;
    int64_t age = 0;  // when it was last read or given back: the oldest is reused first
  };

  int64_t find(int64_t k) const;
  // A buffer for a new read: a free one, else the oldest clean one not wanted, else (`may_wait`)
  // the oldest written-back one not wanted once its write has landed; -1 when there is none.
  int64_t take_buffer(const std::vector<int64_t>& wanted, bool may_wait);
  // Waits for the buffer's read or write; on an error it is left free (its bytes untrusted).
  void settle(Buffer& b);
  void read_into(Buffer& b, int64_t k);
  // The chunks read-ahead wants next, in order, at most buffers - 1.
  std::vector<int64_t> wanted() const;
  void read_ahead(bool may_wait);
  // A chunk was taken for an update: the round it belongs to.
  void note_update(int64_t k);
  StagedOptimizer pointers(const Buffer& b) const;

  int64_t chunk_size_ = 0;
  bool has_master_ = false;
  int64_t payload_bytes_ = 0;  // one chunk's optimizer payloads
  std::unordered_map<int64_t, int64_t> slot_of_;
  std::mutex io_mutex_;  // acquire, release, flush (Note [nvme staging])
  std::vector<Buffer> buffers_;
  int64_t next_age_ = 0;
  NvmeFigures taken_;               // the totals at the last take_figures()
  mutable std::mutex order_mutex_;  // the announced order and the rounds
  std::deque<int64_t> announced_;
  std::vector<int64_t> round_, last_round_;
  std::unordered_set<int64_t> in_round_;
  // Last member: destroyed first, so that every operation in flight ends before its buffer goes.
  std::unique_ptr<nvme::NvmeStore> store_;
};

}  // namespace pstar::engine
