// The io_uring backend: one ring of queue_depth entries and one thread per direction. The thread
// keeps the ring full from its channel's queue and reaps completions (Note [nvme requests]).
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "channel.h"
#include "pstar/base/error.h"

#if PSTAR_HAVE_LIBURING
#include <liburing.h>
#endif

namespace pstar::nvme {

#if PSTAR_HAVE_LIBURING

bool io_uring_available(std::string* why) {
  struct io_uring ring;
  const int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0) {
    if (why != nullptr) *why = str_cat("io_uring_queue_init: ", std::strerror(-rc));
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

namespace detail {
namespace {

class UringChannel final : public Channel {
 public:
  explicit UringChannel(ChannelConfig config)
      : Channel(std::move(config)), slots_(config_.queue_depth) {
    for (int i = config_.queue_depth - 1; i >= 0; --i) free_.push_back(i);
  }
  ~UringChannel() override {
    shut_down();
    if (initialised_) io_uring_queue_exit(&ring_);
  }

  // 0, or the negative errno of io_uring_queue_init; then starts the thread.
  int start() {
    // Twice the depth of completion entries (liburing's default), so completions never overflow.
    const int rc = io_uring_queue_init(static_cast<unsigned>(config_.queue_depth), &ring_, 0);
    if (rc < 0) return rc;
    initialised_ = true;
    thread_ = std::thread([this] { run(); });
    return 0;
  }

  void shut_down() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      cancel_queued_locked();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  // Hands what the queue holds to the ring, up to its depth.
  void fill_locked() {
    while (!free_.empty()) {
      std::optional<Piece> piece = take_locked();
      if (!piece) break;
      if (piece->inject != Inject::kNone) {
        const int64_t result = injected_result(*piece);
        complete_locked(std::move(*piece), result);
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      PSTAR_INTERNAL_ASSERT(sqe != nullptr, "io_uring submission queue full below its depth");
      const int slot = free_.back();
      free_.pop_back();
      char* buf = piece->job->buf + piece->pos;
      const auto n = static_cast<unsigned>(piece->bytes);
      if (config_.op == Op::kRead)
        io_uring_prep_read(sqe, config_.fd, buf, n, static_cast<__u64>(piece->offset));
      else
        io_uring_prep_write(sqe, config_.fd, buf, n, static_cast<__u64>(piece->offset));
      io_uring_sqe_set_data64(sqe, static_cast<__u64>(slot));
      slots_[slot] = std::move(*piece);
    }
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      fill_locked();
      if (free_.size() == slots_.size()) {  // nothing in flight
        if (idle_locked()) {
          if (stopping_) return;
          cv_.wait(lock);
        }
        continue;
      }
      lock.unlock();
      // Submits what fill_locked prepared (if anything) and waits for at least one completion.
      // EAGAIN: the kernel lacked memory for the requests this instant; they stay queued.
      int rc = 0;
      do {
        rc = io_uring_submit_and_wait(&ring_, 1);
        if (rc == -EAGAIN) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } while (rc == -EINTR || rc == -EAGAIN);
      PSTAR_INTERNAL_ASSERT(rc >= 0, "io_uring_submit_and_wait: ", std::strerror(-rc));
      lock.lock();
      unsigned head = 0, seen = 0;
      io_uring_cqe* cqe = nullptr;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        const auto slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
        const int64_t result = cqe->res;
        ++seen;
        free_.push_back(slot);
        complete_locked(std::move(slots_[slot]), result);
      }
      io_uring_cq_advance(&ring_, seen);
    }
  }

  io_uring ring_{};
  bool initialised_ = false;
  std::vector<Piece> slots_;  // the request behind each ring entry in flight, by user_data
  std::vector<int> free_;     // entries not in flight
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Channel> make_uring_channel(ChannelConfig config, std::string* why) {
  auto channel = std::make_unique<UringChannel>(std::move(config));
  const int rc = channel->start();
  if (rc < 0) {
    *why = str_cat("io_uring_queue_init: ", std::strerror(-rc));
    return nullptr;
  }
  return channel;
}

}  // namespace detail

#else  // !PSTAR_HAVE_LIBURING

bool io_uring_available(std::string* why) {
  if (why != nullptr)
    *why = "this build has no liburing (liburing-dev not found, or PSTAR_WITH_LIBURING=OFF)";
  return false;
}

namespace detail {
std::unique_ptr<Channel> make_uring_channel(ChannelConfig, std::string* why) {
  io_uring_available(why);
  return nullptr;
}
}  // namespace detail

#endif

}  // namespace pstar::nvme
