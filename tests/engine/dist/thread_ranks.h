// Ranks as threads of one process: a test double of dist::Communicator (the engine's only door to
// the other ranks) over shared memory, so that tests run N ranks of the chunk engine without
// processes or sockets. Its collectives give what the Gloo rings give (the same checks run on both:
// collective_checks.h), with sums in rank order instead of ring order, so their last bits may
// differ from a Gloo run's. A rank whose body throws or returns false ends the others' waits with
// a DistError instead of a hang, as do waits longer than the timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/dist/communicator.h"

namespace pstar::testing {

// What the ranks of one run share: a generation barrier and one published slot per rank.
class ThreadHub {
 public:
  ThreadHub(int64_t n, std::chrono::seconds timeout)
      : n_(n),
        timeout_(timeout),
        pointers_(static_cast<size_t>(n)),
        strings_(static_cast<size_t>(n)) {}

  int64_t size() const { return n_; }

  // Returns once every rank has arrived, or throws DistError once one has failed or the wait is
  // longer than the timeout.
  void arrive(int64_t rank) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (failed_) throw_failed(rank);
    const int64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return;
    }
    if (!wake_.wait_for(lock, timeout_, [&] { return generation_ != generation || failed_; })) {
      failed_ = true;
      wake_.notify_all();
      PSTAR_THROW(DistError, "thread rank ", rank, ": waited more than ", timeout_.count(),
                  " s for the other ranks");
    }
    if (generation_ == generation) throw_failed(rank);
  }
  void fail() {
    const std::lock_guard<std::mutex> lock(mutex_);
    failed_ = true;
    wake_.notify_all();
  }

  // Each rank writes its own slot before a barrier and reads the others' after it.
  void*& pointer(int64_t rank) { return pointers_[static_cast<size_t>(rank)]; }
  std::string& text(int64_t rank) { return strings_[static_cast<size_t>(rank)]; }

 private:
  [[noreturn]] void throw_failed(int64_t rank) const {
    PSTAR_THROW(DistError, "thread rank ", rank, ": another rank has failed");
  }

  const int64_t n_;
  const std::chrono::seconds timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  int64_t arrived_ = 0, generation_ = 0;
  bool failed_ = false;
  std::vector<void*> pointers_;
  std::vector<std::string> strings_;
};

class ThreadCommunicator final : public dist::Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadHub> hub, int64_t rank) : hub_(std::move(hub)) {
    world_.rank = rank;
    world_.world_size = hub_->size();
    world_.local_rank = rank;
    world_.local_world_size = hub_->size();
    world_.launcher = "test threads";
  }

  const dist::WorldInfo& world() const override { return world_; }

  // Plays a device communicator (Note [device collectives]): the engine then hands it the memory
  // of the tier's device side, which on the emulated and checking tiers the host addresses too,
  // and flat buffers only (Note [flat collectives]), as NCCL needs: it refuses anything else.
  void set_on_device(bool yes) { on_device_ = yes; }
  bool on_device() const override { return on_device_; }
  // Called with the parts of every all_gather, so that a test can hold the engine to the side its
  // communicator moves (Note [staged collectives]) and see how the parts lie.
  void set_gather_check(std::function<void(const std::vector<void*>& parts, int64_t bytes)> check) {
    gather_check_ = std::move(check);
  }
  // The same for the flat buffer of every reduce_scatter_flat (Note [flat collectives]).
  void set_reduce_check(std::function<void(const float* flat, int64_t bytes)> check) {
    reduce_check_ = std::move(check);
  }

  void all_gather(const std::vector<void*>& parts, int64_t bytes) override {
    const int64_t n = world_size(), me = rank();
    PSTAR_INTERNAL_ASSERT(static_cast<int64_t>(parts.size()) == n);
    if (gather_check_) gather_check_(parts, bytes);
    if (on_device_) {
      for (int64_t r = 0; r < n; ++r)
        PSTAR_INTERNAL_ASSERT(
            parts[static_cast<size_t>(r)] == static_cast<char*>(parts[0]) + r * bytes,
            "a device communicator's all_gather was handed parts apart");
    }
    hub_->pointer(me) = parts[static_cast<size_t>(me)];
    hub_->arrive(me);
    for (int64_t r = 0; r < n; ++r)
      if (r != me) std::memcpy(parts[static_cast<size_t>(r)], hub_->pointer(r), bytes);
    hub_->arrive(me);  // no rank changes its part before every rank has copied it
    stats_.bytes_sent += (n - 1) * bytes;
  }

  void reduce_scatter(int64_t numel, const std::function<void(int64_t, float*)>& add_local,
                      float* out) override {
    PSTAR_INTERNAL_ASSERT(!on_device_, "a device communicator reduces flat buffers only");
    const int64_t n = world_size(), me = rank();
    std::vector<float> mine(static_cast<size_t>(n * numel), 0.0F);
    for (int64_t part = 0; part < n; ++part) add_local(part, mine.data() + part * numel);
    sum_flat(mine.data(), numel);
    std::memcpy(out, mine.data() + me * numel, static_cast<size_t>(numel) * 4);
  }

  // The same sums as reduce_scatter's, in the same rank order.
  void reduce_scatter_flat(float* flat, int64_t numel) override {
    if (reduce_check_) reduce_check_(flat, world_size() * numel * 4);
    sum_flat(flat, numel);
  }

  void all_reduce_sum(std::vector<double>& values) override {
    const int64_t n = world_size(), me = rank();
    hub_->pointer(me) = values.data();
    hub_->arrive(me);
    std::vector<double> sum(values.size(), 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (size_t i = 0; i < values.size(); ++i)
        sum[i] += static_cast<const double*>(hub_->pointer(r))[i];
    hub_->arrive(me);
    values = sum;
    stats_.bytes_sent += static_cast<int64_t>(values.size() * sizeof(double));
  }
  using Communicator::all_reduce_sum;

  void barrier() override { hub_->arrive(rank()); }

  std::vector<std::string> exchange(const std::string& key, const std::string& mine) override {
    (void)key;  // every rank exchanges the same keys in the same order
    hub_->text(rank()) = mine;
    hub_->arrive(rank());
    std::vector<std::string> all;
    for (int64_t r = 0; r < world_size(); ++r) all.push_back(hub_->text(r));
    hub_->arrive(rank());
    return all;
  }

  dist::CommStats take_stats() override { return std::exchange(stats_, dist::CommStats{}); }

 private:
  // Sums this rank's part of every rank's flat buffer, in rank order, into its own slot.
  void sum_flat(float* flat, int64_t numel) {
    const int64_t n = world_size(), me = rank();
    hub_->pointer(me) = flat;
    hub_->arrive(me);
    std::vector<float> sum(static_cast<size_t>(numel), 0.0F);
    for (int64_t r = 0; r < n; ++r) {
      const float* theirs = static_cast<const float*>(hub_->pointer(r)) + me * numel;
      for (int64_t i = 0; i < numel; ++i) sum[static_cast<size_t>(i)] += theirs[i];
    }
    hub_->arrive(me);  // every rank has read this one's slots before it overwrites its own
    std::memcpy(flat + me * numel, sum.data(), static_cast<size_t>(numel) * 4);
    stats_.bytes_sent += (n - 1) * numel * 4;
  }

  std::shared_ptr<ThreadHub> hub_;
  dist::WorldInfo world_;
  dist::CommStats stats_;
  bool on_device_ = false;
  std::function<void(const std::vector<void*>&, int64_t)> gather_check_;
  std::function<void(const float*, int64_t)> reduce_check_;
};

// Runs body(comm) on `n` ranks, each a thread of this process, and returns each rank's error ("":
// none). A rank that throws or whose body returns false ends the others' waits.
inline std::vector<std::string> thread_rank_errors(
    int n, const std::function<bool(dist::Communicator&)>& body,
    std::chrono::seconds timeout = std::chrono::seconds(60)) {
  auto hub = std::make_shared<ThreadHub>(n, timeout);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(hub, r);
      try {
        if (!body(comm)) {
          errors[static_cast<size_t>(r)] = "its checks failed (its stderr says)";
          hub->fail();
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        hub->fail();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// The same, with a test failure for each rank that failed.
inline void run_thread_ranks(int n, const std::function<bool(dist::Communicator&)>& body,
                             std::chrono::seconds timeout = std::chrono::seconds(60)) {
  const std::vector<std::string> errors = thread_rank_errors(n, body, timeout);
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(errors[static_cast<size_t>(r)].empty())
        << "thread rank " << r << ": " << errors[static_cast<size_t>(r)];
}

}  // namespace pstar::testing
