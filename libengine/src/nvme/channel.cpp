#include "channel.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::nvme::detail {

// Note [nvme requests] (channel.h).

void Channel::enqueue(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PSTAR_INTERNAL_ASSERT(!stopping_, "an NVMe operation was queued after the store was closed");
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

std::optional<Piece> Channel::take_locked() {
  std::optional<Piece> piece;
  while (!piece && !retries_.empty()) {
    Piece p = std::move(retries_.front());
    retries_.pop_front();
    if (p.job->error != 0) {  // its operation failed meanwhile: the continuation is dropped
      --p.job->in_flight;
      finish_if_complete_locked(p.job);
      continue;
    }
    piece = std::move(p);
  }
  while (!piece && !jobs_.empty()) {
    std::shared_ptr<Job> job = jobs_.front();
    if (job->error != 0 || job->issued == job->bytes) {
      jobs_.pop_front();
      continue;
    }
    Piece p;
    p.job = job;
    p.pos = job->issued;
    p.offset = job->offset + p.pos;
    p.bytes = std::min(config_.request_bytes, job->bytes - job->issued);
    job->issued += p.bytes;
    ++job->in_flight;
    if (job->issued == job->bytes) jobs_.pop_front();
    piece = std::move(p);
  }
  if (!piece) return piece;
  const int64_t index = next_request_++;
  const FaultInjection& f = config_.fault;
  const bool mine = (f.op == FaultInjection::Op::kRead && config_.op == Op::kRead) ||
                    (f.op == FaultInjection::Op::kWrite && config_.op == Op::kWrite);
  if (piece->inject == Inject::kNone && mine && index == f.request)
    piece->inject = f.error != 0 ? Inject::kFail : Inject::kShort;
  return piece;
}

int64_t Channel::injected_result(const Piece& piece) const {
  switch (piece.inject) {
    case Inject::kNone:
      break;
    case Inject::kFail:
      return -config_.fault.error;
    case Inject::kShort:
      return std::min(config_.fault.short_bytes, piece.bytes);
    case Inject::kEof:
      return 0;
  }
  PSTAR_INTERNAL_ASSERT(false, "no injection for this request");
}

void Channel::fail_locked(Job& job, int error, const std::string& text) {
  if (job.error != 0) return;  // the first failure is the one reported
  job.error = error;
  job.error_text = text;
}

void Channel::finish_if_complete_locked(const std::shared_ptr<Job>& job) {
  if (job->finished || job->in_flight != 0) return;
  if (job->error == 0 && job->issued != job->bytes) return;
  job->finished = true;
  {
    std::lock_guard<std::mutex> lock(config_.completion->mutex);
    job->done = true;
  }
  config_.completion->cv.notify_all();
}

void Channel::complete_locked(Piece piece, int64_t result) {
  Job& job = *piece.job;
  const char* verb = config_.op == Op::kRead ? "read" : "write";
  if (result < 0) {
    const int err = static_cast<int>(-result);
    fail_locked(job, err,
                str_cat(verb, " of ", piece.bytes, " bytes at offset ", piece.offset,
                        " failed: ", std::strerror(err), " (errno ", err, ")"));
  } else if (result == 0) {
    fail_locked(job, EIO,
                str_cat("short ", verb, ": the file ended at offset ", piece.offset, " with ",
                        piece.bytes, " bytes of the request not moved; was it truncated?"));
  } else if (result < piece.bytes) {
    // Continued from where it stopped (Note [nvme requests]); still in flight.
    piece.offset += result;
    piece.pos += result;
    piece.bytes -= result;
    piece.inject = piece.inject == Inject::kNone ? Inject::kNone : Inject::kEof;
    retries_.push_front(std::move(piece));
    cv_.notify_one();
    return;
  }
  --job.in_flight;
  finish_if_complete_locked(piece.job);
}

void Channel::cancel_queued_locked() {
  for (const std::shared_ptr<Job>& job : jobs_) {
    fail_locked(*job, ECANCELED, "cancelled: the store was closed before it ran");
    finish_if_complete_locked(job);
  }
  jobs_.clear();
}

namespace {

class ThreadChannel final : public Channel {
 public:
  explicit ThreadChannel(ChannelConfig config) : Channel(std::move(config)) {
    for (int i = 0; i < config_.queue_depth; ++i) threads_.emplace_back([this] { run(); });
  }
  ~ThreadChannel() override { shut_down(); }

  void shut_down() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      cancel_queued_locked();
    }
    cv_.notify_all();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      std::optional<Piece> piece = take_locked();
      if (!piece) {
        if (stopping_) return;
        cv_.wait(lock);
        continue;
      }
      lock.unlock();
      const int64_t result = execute(*piece);
      lock.lock();
      complete_locked(std::move(*piece), result);
    }
  }

  int64_t execute(const Piece& piece) const {
    if (piece.inject != Inject::kNone) return injected_result(piece);
    char* buf = piece.job->buf + piece.pos;
    const size_t n = static_cast<size_t>(piece.bytes);
    for (;;) {
      const ssize_t r = config_.op == Op::kRead ? ::pread(config_.fd, buf, n, piece.offset)
                                                : ::pwrite(config_.fd, buf, n, piece.offset);
      if (r >= 0) return r;
      if (errno != EINTR) return -errno;
    }
  }

  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Channel> make_thread_channel(ChannelConfig config) {
  return std::make_unique<ThreadChannel>(std::move(config));
}

}  // namespace pstar::nvme::detail
