// One background thread that runs jobs one at a time, in the order of their priority and, among
// equal priorities, in the order they were queued, so that the thread which queued them can go on
// and wait only for the job it needs next (Note [host adam overlap] in engine/chunked_engine.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
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

  // Queues `job` and returns its ticket: 1 for the first job, then 2, 3, ... The next job to start
  // is the queued one of the lowest `priority`, the earliest queued among equals: with one priority
  // for every job (the default), queue order. A job runs with the floating-point control state
  // (MXCSR: rounding, flush-to-zero) of the thread that queued it, so which thread runs it cannot
  // change its numbers. `tag` says whose job it is (the chunk engine's: the chunk's), for
  // queued_ahead.
  int64_t submit(Job job, int64_t priority = 0, int64_t tag = -1);
  // Whether job `ticket` has finished (or will never run because an earlier job threw).
  bool done(int64_t ticket) const;
  // Blocks until job `ticket` has finished, and with it every job queued before it at the same or
  // a lower priority (they start first). Rethrows the exception of the first job that threw,
  // whichever ticket is awaited, on every call from then on: the jobs not started are dropped.
  void wait(int64_t ticket);
  // Blocks until every job queued so far has finished (returns at once when none is left).
  void wait_all();
  // Takes job `ticket` out of the queue if it has not started: it will never run, and counts as
  // finished. Returns whether it did (false: it has started, or finished).
  bool drop(int64_t ticket);
  // The jobs of other tags queued, not started, that will start before job `ticket`: what a wait
  // for it waits behind besides the job running and its own tag's. 0 once it has started.
  int64_t queued_ahead(int64_t ticket) const;

 private:
  struct Queued {
    Job job;
    unsigned mxcsr;
    int64_t ticket;
    int64_t priority;
    int64_t tag;
    // Starts before `other` (the lower priority, the earlier queued among equals).
    bool before(const Queued& other) const {
      return priority < other.priority || (priority == other.priority && ticket < other.ticket);
    }
  };
  void run();
  bool done_locked(int64_t ticket) const;

  mutable std::mutex mutex_;
  std::condition_variable queued_cv_, finished_cv_;
  std::deque<Queued> queue_;
  std::set<int64_t> open_;  // queued or running
  int64_t submitted_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace pstar::core
