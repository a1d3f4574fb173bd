#include "pstar/core/ordered_worker.h"

#include <xmmintrin.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace pstar::core {
namespace {

TEST(OrderedWorker, RunsJobsInQueueOrderOffTheCallingThread) {
  OrderedWorker worker;
  std::vector<int> order;  // written by the worker only, read after wait_all
  std::atomic<int> on_caller{0};
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < 50; ++i) {
    const int64_t ticket = worker.submit([&order, &on_caller, caller, i] {
      if (std::this_thread::get_id() == caller) ++on_caller;
      order.push_back(i);
    });
    EXPECT_EQ(ticket, i + 1);
  }
  worker.wait_all();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(on_caller.load(), 0);
  EXPECT_TRUE(worker.done(50));
}

// Note [speculative adam] in engine/hybrid_adam.h: jobs start by priority, in queue order among
// equals, and a wait's count of what it waits behind is the other tags' jobs that start first.
TEST(OrderedWorker, JobsStartByPriorityThenQueueOrder) {
  OrderedWorker worker;
  std::atomic<bool> release{false}, started{false};
  std::vector<int> order;  // written by the worker only, read after wait_all
  // Holds the worker until the rest are queued.
  worker.submit([&] {
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int64_t a = worker.submit([&] { order.push_back(1); }, 5, 1);
  const int64_t b = worker.submit([&] { order.push_back(2); }, 3, 2);
  const int64_t c = worker.submit([&] { order.push_back(3); }, 5, 1);
  const int64_t d = worker.submit([&] { order.push_back(4); }, 3, 2);
  EXPECT_EQ(worker.queued_ahead(a), 2);  // b and d: another tag, a lower priority
  EXPECT_EQ(worker.queued_ahead(c), 2);  // a is its own tag's
  EXPECT_EQ(worker.queued_ahead(d), 0);  // b is its own tag's
  EXPECT_EQ(worker.queued_ahead(b), 0);
  release = true;
  worker.wait(a);
  EXPECT_TRUE(worker.done(b) && worker.done(d)) << "a lower priority starts first";
  worker.wait_all();
  EXPECT_EQ(order, (std::vector<int>{2, 4, 1, 3}));
  EXPECT_EQ(worker.queued_ahead(a), 0);
}

TEST(OrderedWorker, WaitReturnsOnceItsJobAndTheEarlierOnesFinished) {
  OrderedWorker worker;
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  const int64_t first = worker.submit([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++ran;
  });
  const int64_t second = worker.submit([&] { ++ran; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(worker.done(first));
  EXPECT_FALSE(worker.done(second));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  worker.wait(second);
  EXPECT_EQ(ran.load(), 2);
  EXPECT_TRUE(worker.done(first));
  releaser.join();
}

TEST(OrderedWorker, AFailedJobIsRethrownOnEveryWaitAndDropsTheJobsAfterIt) {
  OrderedWorker worker;
  std::atomic<int> ran{0};
  const int64_t ok = worker.submit([&] { ++ran; });
  const int64_t bad = worker.submit([] { throw std::runtime_error("chunk 3: event failed"); });
  const int64_t after = worker.submit([&] { ++ran; });
  EXPECT_THROW(worker.wait(after), std::runtime_error);
  EXPECT_TRUE(worker.done(bad));
  EXPECT_TRUE(worker.done(after));
  try {
    worker.wait(ok);
    ADD_FAILURE() << "waiting after a failure did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "chunk 3: event failed");
  }
  const int64_t later = worker.submit([&] { ++ran; });
  EXPECT_THROW(worker.wait(later), std::runtime_error);
  EXPECT_EQ(ran.load(), 1);  // only the job before the failure
}

// The floating-point control state decides e.g. whether denormals flush to zero: a job sees the
// queuing thread's, not the worker's own.
TEST(OrderedWorker, JobsRunWithTheQueuingThreadsMxcsr) {
  OrderedWorker worker;
  const unsigned saved = _mm_getcsr();
  const unsigned flushing = saved | 0x8040u;  // FTZ and DAZ
  _mm_setcsr(flushing);
  unsigned seen_flushing = 0;
  worker.submit([&] { seen_flushing = _mm_getcsr(); });
  _mm_setcsr(saved);
  unsigned seen_plain = 0;
  worker.submit([&] { seen_plain = _mm_getcsr(); });
  worker.wait_all();
  EXPECT_EQ(seen_flushing & 0xFFC0u, flushing & 0xFFC0u);  // the control bits, not the flags
  EXPECT_EQ(seen_plain & 0xFFC0u, saved & 0xFFC0u);
}

TEST(OrderedWorker, DestroyingDropsJobsNotStarted) {
  std::atomic<int> ran{0};
  std::atomic<bool> started{false};
  {
    OrderedWorker worker;
    worker.submit([&] {
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ++ran;
    });
    for (int i = 0; i < 10; ++i) worker.submit([&] { ++ran; });
    while (!started) std::this_thread::yield();
  }
  EXPECT_EQ(ran.load(), 1);  // the running job finished; the queued ones never ran
}

TEST(OrderedWorker, WaitAllWithNothingQueuedReturns) {
  OrderedWorker worker;
  worker.wait_all();
  EXPECT_TRUE(worker.done(0));
}

}  // namespace
}  // namespace pstar::core
