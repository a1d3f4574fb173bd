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

int64_t OrderedWorker::submit(Job job) {
  int64_t ticket = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Queued{std::move(job), _mm_getcsr()});
    ticket = ++submitted_;
  }
  queued_cv_.notify_one();
  return ticket;
}

bool OrderedWorker::done(int64_t ticket) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return finished_ >= ticket;
}

void OrderedWorker::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_cv_.wait(lock, [&] { return finished_ >= ticket; });
  if (error_) std::rethrow_exception(error_);
}

void OrderedWorker::wait_all() {
  int64_t last = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    last = submitted_;
  }
  wait(last);
}

void OrderedWorker::run() {
  const unsigned own_mxcsr = _mm_getcsr();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    if (error_) {  // queued after a job failed: dropped like the rest
      ++finished_;
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
    ++finished_;
    if (error && !error_) {
      error_ = error;
      // The jobs after a failed one are dropped: they count as finished, and waiting for them
      // rethrows the error.
      finished_ += static_cast<int64_t>(queue_.size());
      queue_.clear();
    }
    finished_cv_.notify_all();
  }
}

}  // namespace pstar::core
