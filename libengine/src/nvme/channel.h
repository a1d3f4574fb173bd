// One direction's queue of slot operations (reads or writes), split into requests and run by a
// backend: an io_uring ring (uring_channel.cpp) or a few threads calling pread/pwrite
// (channel.cpp). What the two share lives in Channel: splitting, fault injection, short transfers,
// errors and completion.
//
// Note [nvme requests]
// A slot operation moves `bytes` (a multiple of the alignment) as requests of request_bytes, at
// most queue_depth of them in flight per direction; requests of the next queued operation start
// as soon as the current one has issued its last, so the queue stays full across operations. A
// request that transfers fewer bytes than asked is continued from where it stopped (the kernel
// may split a transfer); one that transfers nothing has met the end of the file, which a slot
// inside the preallocated file never does unless the file was truncated: the operation fails. A
// failed request fails its operation: its requests not yet issued are dropped, those in flight are
// waited for, and only then is the operation complete, so the kernel never writes into a buffer
// whose operation its owner has seen end.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "pstar/nvme/store.h"

namespace pstar::nvme::detail {

enum class Op { kRead, kWrite };

// Completion of operations, shared by both directions and the store's wait().
struct Completion {
  std::mutex mutex;
  std::condition_variable cv;
};

struct Job {
  Op op = Op::kRead;
  int64_t slot = 0;
  char* buf = nullptr;
  int64_t offset = 0;      // in the file
  int64_t bytes = 0;       // moved: a multiple of the alignment
  int64_t data_bytes = 0;  // the caller's bytes (<= bytes)
  uint32_t crc = 0;        // a write's CRC-32 of its data_bytes
  // The channel's, under its mutex:
  int64_t issued = 0;  // bytes handed to requests
  int in_flight = 0;   // requests not complete (a continuation counts as its request)
  bool finished = false;
  int error = 0;           // the first failure's errno (EIO for the end of the file)
  std::string error_text;  // and what it was
  // The store's, under Completion::mutex:
  bool done = false;
  bool waited = false;
};

enum class Inject { kNone, kFail, kShort, kEof };

struct Piece {
  std::shared_ptr<Job> job;
  int64_t offset = 0;  // in the file
  int64_t pos = 0;     // in the job's buffer
  int64_t bytes = 0;
  Inject inject = Inject::kNone;
};

struct ChannelConfig {
  Op op = Op::kRead;
  int fd = -1;
  std::string path;  // for messages
  int queue_depth = 8;
  int64_t request_bytes = 1 << 20;
  FaultInjection fault;
  Completion* completion = nullptr;
};

class Channel {
 public:
  explicit Channel(ChannelConfig config) : config_(std::move(config)) {}
  virtual ~Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  void enqueue(std::shared_ptr<Job> job);
  // Cancels what is queued and not yet issued, waits for what is in flight and ends the
  // backend's threads. Called once, by the store's destructor (before the file is closed).
  virtual void shut_down() = 0;

 protected:
  // The next request to issue, or none. Caller holds mutex_.
  std::optional<Piece> take_locked();
  // Records a request's result: bytes transferred, or -errno. Caller holds mutex_.
  void complete_locked(Piece piece, int64_t result);
  // What an injected request returns instead of reaching the kernel.
  int64_t injected_result(const Piece& piece) const;
  void cancel_queued_locked();
  bool idle_locked() const { return jobs_.empty() && retries_.empty(); }

  ChannelConfig config_;
  std::mutex mutex_;
  std::condition_variable cv_;  // work arrived, or shutting down
  bool stopping_ = false;

 private:
  void fail_locked(Job& job, int error, const std::string& text);
  void finish_if_complete_locked(const std::shared_ptr<Job>& job);

  std::deque<std::shared_ptr<Job>> jobs_;  // operations with requests still to issue
  std::deque<Piece> retries_;              // continuations of short requests, issued first
  int64_t next_request_ = 0;
};

// pread/pwrite from queue_depth threads (the fallback backend).
std::unique_ptr<Channel> make_thread_channel(ChannelConfig config);
// An io_uring ring of queue_depth entries with its own thread; null, with the reason in `why`,
// where io_uring is refused or this build has no liburing.
std::unique_ptr<Channel> make_uring_channel(ChannelConfig config, std::string* why);

}  // namespace pstar::nvme::detail
