#include "pstar/core/ordered_worker.h"

#include <xmmintrin.h>

#include <utility>

namespace pstar::core {

OrderedWorker::OrderedWorker() : thread_([this] { run(); }) {}

OrderedWorker::~OrderedWorker() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  queued_cv_.notify_all();
  thread_.join();
}

int64_t OrderedWorker::submit(Job job, int64_t priority, int64_t tag) {
  int64_t ticket = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ticket = ++submitted_;
    queue_.push_back(Queued{std::move(job), _mm_getcsr(), ticket, priority, tag});
    open_.insert(ticket);
  }
  queued_cv_.notify_one();
  return ticket;
}

bool OrderedWorker::done_locked(int64_t ticket) const {
  return ticket <= submitted_ && open_.count(ticket) == 0;
}

bool OrderedWorker::done(int64_t ticket) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return done_locked(ticket);
}

void OrderedWorker::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_cv_.wait(lock, [&] { return done_locked(ticket); });
  if (error_) std::rethrow_exception(error_);
}

void OrderedWorker::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_cv_.wait(lock, [&] { return open_.empty(); });
  if (error_) std::rethrow_exception(error_);
}

bool OrderedWorker::drop(int64_t ticket) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = queue_.begin();
    while (it != queue_.end() && it->ticket != ticket) ++it;
    if (it == queue_.end()) return false;
    queue_.erase(it);
    open_.erase(ticket);
  }
  finished_cv_.notify_all();
  return true;
}

int64_t OrderedWorker::queued_ahead(int64_t ticket) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const Queued* mine = nullptr;
  for (const Queued& q : queue_)
    if (q.ticket == ticket) mine = &q;
  if (mine == nullptr) return 0;
  int64_t ahead = 0;
  for (const Queued& q : queue_) ahead += q.tag != mine->tag && q.before(*mine) ? 1 : 0;
  return ahead;
}

void OrderedWorker::run() {
  const unsigned own_mxcsr = _mm_getcsr();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    // The lowest priority, the earliest queued among equals. A scan: a few hundred jobs at most
    // (the chunk engine queues about two per chunk), against milliseconds of work each.
    auto next_it = queue_.begin();
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->before(*next_it)) next_it = it;
    Queued next = std::move(*next_it);
    queue_.erase(next_it);
    if (error_) {  // queued after a job failed: dropped like the rest
      open_.erase(next.ticket);
      finished_cv_.notify_all();
      continue;
    }
    lock.unlock();
    std::exception_ptr error;
    _mm_setcsr(next.mxcsr);
    try {
      next.job();
    } catch (...) {
      error = std::current_exception();
    }
    _mm_setcsr(own_mxcsr);
    next.job = nullptr;  // what the job holds goes before the waiter hears it finished
    lock.lock();
    open_.erase(next.ticket);
    if (error && !error_) {
      error_ = error;
      // The jobs not started are dropped: they count as finished, and waiting for them rethrows
      // the error.
      for (const Queued& q : queue_) open_.erase(q.ticket);
      queue_.clear();
    }
    finished_cv_.notify_all();
  }
}

}  // namespace pstar::core
