// One background thread that runs jobs in the order they were queued, so that the thread which
// queued them can go on and wait only for the job it needs next (Note [host adam overlap] in
// engine/chunked_engine.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace pstar::core {

class OrderedWorker {
 public:
  using Job = std::function<void()>;

  OrderedWorker();
  // Drops the jobs not started yet and waits for the one running.
  ~OrderedWorker();
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;

  // Queues `job` and returns its ticket: 1 for the first job, then 2, 3, ... A job runs with the
  // floating-point control state (MXCSR: rounding, flush-to-zero) of the thread that queued it,
  // so which thread runs it cannot change its numbers.
  int64_t submit(Job job);
  // Whether job `ticket` has finished (or will never run because an earlier job threw).
  bool done(int64_t ticket) const;
  // Blocks until job `ticket` and every job before it have finished. Rethrows the exception of the
  // first job that threw, whichever ticket is awaited, on every call from then on: the jobs after
  // it are dropped.
  void wait(int64_t ticket);
  // wait() for the last job queued (returns at once when none was).
  void wait_all();

 private:
  struct Queued {
    Job job;
    unsigned mxcsr;
  };
  void run();

  mutable std::mutex mutex_;
  std::condition_variable queued_cv_, finished_cv_;
  std::deque<Queued> queue_;
  int64_t submitted_ = 0, finished_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace pstar::core
