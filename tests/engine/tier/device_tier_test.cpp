// The chunk engine against a checking tier that holds it to the device tier's contract (Note
// [device tier]): every kernel is told the side its buffers are really on, the bytes the engine
// reports moving are the bytes the tier copied, and its model data is the memory the tier holds;
// and the device-side helpers (batched sums, the arena's share, workspaces). The emulated tier
// itself is in emulated_tier_test.cpp.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/small_gpt_config.h"
#include "engine/tier/checking_tier.h"
#include "pstar/base/error.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/model/gpt.h"
#include "pstar/model/init.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::tier {
namespace {

using testing::CheckingTier;
using testing::ChunkedEngineOnATier;
using testing::Ledger;

TEST_F(ChunkedEngineOnATier, KernelsSeeTheirSideAndReportsMatchTheTiersLedger) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto c = small_config(bf16);
    Plan plan;
    const auto reference = run(c, nullptr, nullptr, &plan);
    // A budget that holds three compute payloads beside the activations: chunks must move.
    auto ledger = std::make_shared<Ledger>();
    const int64_t chunk = plan.compute_chunk_bytes;
    c.engine.device_memory = plan.non_model_peak + 3 * chunk + chunk / 2;
    int64_t h2d_before = 0, d2h_before = 0, adam_device_before = 0, syncs_before = 0;
    int64_t moved = 0;
    const auto checked =
        run(c, std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max()),
            [&](const train::StepMetrics& m) {
              const int64_t h2d = ledger->copied[1][0], d2h = ledger->copied[0][1];
              EXPECT_EQ(m.engine.moved_h2d_bytes, h2d - h2d_before) << "step " << m.step;
              EXPECT_EQ(m.engine.moved_d2h_bytes, d2h - d2h_before) << "step " << m.step;
              EXPECT_EQ(m.engine.adam.device_chunks, ledger->adam_calls[0] - adam_device_before)
                  << "step " << m.step;
              EXPECT_EQ(m.engine.model_data_bytes, ledger->live_bytes[0] + ledger->live_bytes[1])
                  << "step " << m.step;
              EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
              // No reserve, scratch or caching here: the device held what the engine planned.
              EXPECT_EQ(m.engine.device_reserved_peak_bytes, m.engine.device_peak_bytes)
                  << "step " << m.step;
              // Issue 20, item 3: the engine reports every whole-device synchronisation it asked
              // for, and a tight budget at steady state asks for none.
              EXPECT_EQ(m.engine.steady.device_syncs, ledger->synchronizations - syncs_before)
                  << "step " << m.step;
              if (m.step > c.engine.warmup_iterations + 1) {
                EXPECT_EQ(m.engine.steady.device_syncs, 0) << "step " << m.step;
              }
              syncs_before = ledger->synchronizations;
              moved += h2d - h2d_before;
              h2d_before = h2d;
              d2h_before = d2h;
              adam_device_before = ledger->adam_calls[0];
            });
    EXPECT_EQ(losses(checked), losses(reference));
    EXPECT_GT(moved, 0) << "the budget forced no moves";
    // Every move lands in memory that was never zeroed (issue 20, item 4), and the losses above
    // show that nothing read it before the copy wrote it.
    EXPECT_GT(ledger->uninitialized_allocations, 0) << "moves allocated zeroed memory";
    EXPECT_GT(ledger->unfilled_allocations, 0) << "start-up zeroed the parameters it wrote next";
    EXPECT_GT(ledger->adam_calls[1], 0) << "no Adam ran on the host side";
    EXPECT_LE(ledger->peak_device_bytes, *c.engine.device_memory);
    EXPECT_EQ(ledger->copied[0][0] + ledger->copied[1][1], 0) << "copies within one side";
    for (const auto& v : ledger->violations) ADD_FAILURE() << v;
  }
}

// Note [fragmented arena]: with chunks of several sizes (Note [chunk sizes]), a device whose free
// bytes are in pieces refuses an upload that placement made room for in bytes; the engine evicts
// more idle chunks until it fits (an upload ahead is dropped instead), and no loss changes, with
// and without prefetch.
TEST_F(ChunkedEngineOnATier, AFragmentedDeviceEvictsMoreAndChangesNoLoss) {
  for (const bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch" : "no prefetch");
    auto c = small_config(/*bf16=*/true);
    c.engine.prefetch = prefetch;
    c.default_chunk_size = 1000;  // modules larger than that get chunks of their own
    Plan plan;
    const auto reference = run(c, nullptr, nullptr, &plan);
    const int64_t chunk = plan.compute_chunk_bytes;  // an ordinary chunk's
    // Room for the largest moment's chunks (a block's MLP weights: 16640 elements) and more.
    const int64_t largest = 17 * chunk;
    c.engine.device_memory = plan.non_model_peak + 3 * largest;
    auto ledger = std::make_shared<Ledger>();
    auto tier = std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
    CheckingTier* checking = tier.get();
    checking->set_contiguous_limit(2 * largest);
    const auto checked = run(c, std::move(tier));
    EXPECT_EQ(losses(checked), losses(reference));
    EXPECT_GT(checking->refused(), 0) << "the device never ran out of contiguous room";
    for (const auto& m : checked)
      EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
    for (const auto& v : ledger->violations) ADD_FAILURE() << v;
  }
}

// Note [prefetch]: with a tight budget the engine copies the next module's chunks ahead, awaits
// each before the module that uses it runs (the checking tier lands a copy ahead only then), stays
// under the budget, and computes the same losses as without prefetching.
TEST_F(ChunkedEngineOnATier, PrefetchedUploadsAreAwaitedBeforeUseAndChangeNoLoss) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto c = small_config(bf16);
    c.engine.prefetch = false;
    Plan plan;
    run(c, nullptr, nullptr, &plan);
    const int64_t chunk = plan.compute_chunk_bytes;
    c.engine.device_memory = plan.non_model_peak + 4 * chunk + chunk / 2;
    const auto lazy = run(c, nullptr);
    c.engine.prefetch = true;
    auto ledger = std::make_shared<Ledger>();
    int64_t prefetched = 0, moved = 0;
    const auto ahead =
        run(c, std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max()),
            [&](const train::StepMetrics& m) {
              EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
              EXPECT_LE(m.engine.prefetched_h2d_bytes, m.engine.moved_h2d_bytes);
              prefetched += m.engine.prefetched_h2d_bytes;
              moved += m.engine.moved_h2d_bytes;
            });
    EXPECT_EQ(losses(ahead), losses(lazy));
    EXPECT_GT(prefetched, 0) << "nothing was copied ahead";
    EXPECT_EQ(prefetched, ledger->copied_ahead);
    EXPECT_GT(ledger->awaited, 0);
    EXPECT_LE(ledger->peak_device_bytes, *c.engine.device_memory);
    for (const auto& v : ledger->violations) ADD_FAILURE() << v;
    RecordProperty(bf16 ? "bf16_prefetched_share" : "fp32_prefetched_share",
                   std::to_string(static_cast<double>(prefetched) / static_cast<double>(moved)));
  }
}

// Note [host adam overlap]: with the host's Adam queued on the worker, each made slower than a
// module's forward so that anything reading or writing a chunk without waiting for its Adam does
// so while the Adam still runs, every chunk is waited for before it is touched (the checking tier
// flags overlaps), and the losses and the final optimizer state are those of Adam run in place.
// fp32 and gradient accumulation have separate gradient payloads, which the worker zeroes. Without
// clipping the update is known before the backward, and chunks are updated early, in it; with
// clipping, only after the gradient norm.
TEST_F(ChunkedEngineOnATier, QueuedHostAdamIsAwaitedBeforeUseAndChangesNoNumber) {
  for (const std::string mode : {"fp32", "bf16", "bf16 accumulating", "bf16 clipped"}) {
    SCOPED_TRACE(mode);
    auto c = small_config(/*bf16=*/mode != "fp32");
    if (mode == "bf16 accumulating") c.gradient_accumulation_steps = 2;
    if (mode == "bf16 clipped") c.gradient_clipping = 0.5;
    ASSERT_EQ(c.gradient_clipping > 0, mode == "bf16 clipped");
    c.engine.overlap_adam = config::OnOffAuto::kOff;
    Plan plan;
    run(c, nullptr, nullptr, &plan);
    // Tight: chunks move and are prefetched, so uploads and Adam compete for the same chunks.
    const int64_t chunk = plan.compute_chunk_bytes;
    c.engine.device_memory = plan.non_model_peak + 4 * chunk + chunk / 2;
    StateBytes in_place_state;
    const auto in_place = run(c, nullptr, nullptr, nullptr, &in_place_state);

    c.engine.overlap_adam = config::OnOffAuto::kOn;
    auto ledger = std::make_shared<Ledger>();
    auto tier = std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
    tier->set_off_thread_adam_delay(std::chrono::milliseconds(3));
    int64_t queued = 0, early = 0, steps_queueing = 0;
    double waited = 0;
    StateBytes overlapped_state;
    const auto overlapped = run(
        c, std::move(tier),
        [&](const train::StepMetrics& m) {
          EXPECT_GE(m.engine.adam.queued_chunks, 0) << "step " << m.step;
          EXPECT_GE(m.engine.adam.wait_s, 0) << "step " << m.step;
          queued += m.engine.adam.queued_chunks;
          EXPECT_LE(m.engine.adam.early_chunks, m.engine.adam.queued_chunks) << "step " << m.step;
          early += m.engine.adam.early_chunks;
          steps_queueing += m.engine.adam.queued_chunks > 0 ? 1 : 0;
          waited += m.engine.adam.wait_s;
        },
        nullptr, &overlapped_state);
    EXPECT_EQ(losses(overlapped), losses(in_place));
    // Early chunks' sums of squares come from the worker: the norm's bits must not change.
    ASSERT_EQ(overlapped.size(), in_place.size());
    for (size_t i = 0; i < in_place.size(); ++i)
      EXPECT_EQ(overlapped[i].grad_norm, in_place[i].grad_norm) << "step " << i + 1;
    // Every step after the warm-up queues its host chunks.
    EXPECT_EQ(steps_queueing, c.training.steps - c.engine.warmup_iterations);
    if (mode == "bf16 clipped")
      EXPECT_EQ(early, 0) << "clipping needs the gradient norm before any update";
    else
      EXPECT_GT(early, 0) << "no chunk was updated in the backward";
    RecordProperty(mode + " early_share",
                   std::to_string(static_cast<double>(early) / static_cast<double>(queued)));
    {
      const std::lock_guard<std::mutex> lock(ledger->mutex);
      EXPECT_GE(ledger->adam_off_thread, queued) << "queued Adam ran on the training thread";
      EXPECT_GT(ledger->adam_off_thread, 0);
      EXPECT_TRUE(ledger->busy.empty());
      for (const auto& v : ledger->violations) ADD_FAILURE() << v;
    }
    ASSERT_EQ(overlapped_state.size(), in_place_state.size());
    for (size_t i = 0; i < in_place_state.size(); ++i) {
      EXPECT_EQ(overlapped_state[i].first, in_place_state[i].first);
      EXPECT_TRUE(overlapped_state[i].second == in_place_state[i].second)
          << in_place_state[i].first;
    }
    RecordProperty(mode + " adam_wait_s", std::to_string(waited));
  }
}

// Note [exact-size host pool], Note [pinned what moves]: over 100 steps under a budget that moves
// chunks and keeps a margin, the tier's host pools hold exactly the host payloads at every step's
// end (no free block kept beyond them), page-locked memory exactly for the payloads that move and
// pageable memory for the rest, they allocate nothing once the plan has settled, and after the
// plan no copy touches pageable memory (only the margin's promotion copied it, once).
TEST_F(ChunkedEngineOnATier, HostPoolsHoldExactlyTheHostPayloadsAndStopGrowing) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto c = small_config(bf16);
    c.training.steps = 3;
    Plan plan;
    const auto reference = run(c, nullptr, nullptr, &plan);
    c.training.steps = 100;
    const int64_t whole = plan.compute_chunk_bytes + plan.optimizer_chunk_bytes;
    c.engine.device_memory = plan.non_model_peak + 5 * plan.compute_chunk_bytes + 2 * whole;
    auto ledger = std::make_shared<Ledger>();
    auto tier = std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
    const CheckingTier* checking = tier.get();
    const int64_t planned = c.engine.warmup_iterations;  // the plan runs at this step's end
    int64_t settled_allocated = -1, copied_at_plan = -1, moved = 0;
    const auto trained = run(c, std::move(tier), [&](const train::StepMetrics& m) {
      const DeviceTier::HostMemory held = checking->host_memory();
      EXPECT_EQ(m.engine.pinned.current, held.pinned.current);
      EXPECT_EQ(m.engine.pageable.current, held.pageable.current);
      EXPECT_EQ(m.engine.pinned.peak, held.pinned.peak);
      const std::lock_guard<std::mutex> lock(ledger->mutex);
      const int64_t host_only = ledger->live_host_only_bytes();
      EXPECT_EQ(m.engine.pageable.current, host_only) << "step " << m.step;
      EXPECT_EQ(m.engine.pinned.current, ledger->live_bytes[1] - host_only) << "step " << m.step;
      // Every payload in memory fit for copies got there by a move: what stays is pageable.
      if (m.step >= planned) {
        EXPECT_EQ(ledger->live_unmoved_copyable_host_bytes(), 0) << "step " << m.step;
      }
      if (m.step > planned) moved += m.engine.moved_h2d_bytes;
      if (m.engine.moved_h2d_bytes + m.engine.moved_d2h_bytes > 0) {
        EXPECT_GT(m.engine.move_s, 0) << "step " << m.step;
      } else {
        EXPECT_EQ(m.engine.move_s, 0) << "step " << m.step;
      }
      if (m.step == planned) copied_at_plan = ledger->host_only_copied;
      if (m.step > planned) {
        EXPECT_EQ(ledger->host_only_copied, copied_at_plan) << "step " << m.step;
      }
      const int64_t allocated = held.pinned.allocated + held.pageable.allocated;
      if (m.step == planned + 2) settled_allocated = allocated;
      if (m.step > planned + 2) {
        EXPECT_EQ(allocated, settled_allocated) << "step " << m.step;
      }
    });
    ASSERT_EQ(trained.size(), 100u);
    for (size_t i = 0; i < reference.size(); ++i) EXPECT_EQ(trained[i].loss, reference[i].loss);
    EXPECT_GT(moved, 0) << "the budget forced no moves";
    EXPECT_GT(ledger->adam_calls[0], 0) << "the budget left no margin";
    EXPECT_GT(copied_at_plan, 0) << "the margin's optimizer state was not pageable";
    EXPECT_GT(ledger->host_only_allocations, 0);
    for (const auto& v : ledger->violations) ADD_FAILURE() << v;
  }
}

// Note [reserved blocks]: without use_cpu_embedding every chunk that starts on the host moves, so
// the engine sets its compute payloads aside before making them (one block per chunk with bf16's
// param/grad reuse, a param and a grad block in fp32); the losses stay the default tier's.
TEST_F(ChunkedEngineOnATier, HostComputePayloadsAreReservedAheadAndChangeNoLoss) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto c = small_config(bf16);
    c.use_cpu_embedding = config::OnOffAuto::kOff;
    c.training.steps = 3;
    Plan plan;
    const auto reference = run(c, nullptr, nullptr, &plan);
    auto ledger = std::make_shared<Ledger>();
    const auto checked =
        run(c, std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max()));
    EXPECT_EQ(losses(checked), losses(reference));
    // Unconstrained: every chunk starts on the host.
    EXPECT_EQ(ledger->reserved_host_blocks, (bf16 ? 1 : 2) * plan.num_chunks);
    for (const auto& v : ledger->violations) ADD_FAILURE() << v;
  }
}

// The pools count against engine.host_memory, free blocks included: free memory the tier holds
// goes back before the engine needs the room, and memory that is held goes against the budget.
TEST_F(ChunkedEngineOnATier, HostPoolsCountAgainstTheHostBudget) {
  auto c = small_config(/*bf16=*/true);
  c.training.steps = 2;
  Plan plan;
  const auto reference = run(c, nullptr, nullptr, &plan);
  // Exactly the model data: every chunk starts on the host.
  const int64_t whole = plan.compute_chunk_bytes + plan.optimizer_chunk_bytes;
  c.engine.host_memory = plan.num_chunks * whole;
  const int64_t extra = whole;  // what the tier holds before the engine allocates anything
  {
    // Free: the engine gives it back and trains.
    auto tier = make_emulated_tier();
    tier->allocate(Side::kHost, extra).reset();
    ASSERT_EQ(tier->host_memory().current(), extra);
    const DeviceTier* held = tier.get();
    const auto trained = run(c, std::move(tier), [&](const train::StepMetrics& m) {
      EXPECT_LE(m.engine.pinned.current + m.engine.pageable.current, *c.engine.host_memory)
          << "step " << m.step;
      EXPECT_LE(held->host_memory().current(), *c.engine.host_memory) << "step " << m.step;
    });
    EXPECT_EQ(losses(trained), losses(reference));
  }
  {
    // In use: the chunks do not fit beside it.
    auto tier = make_emulated_tier();
    Block in_use = tier->allocate(Side::kHost, extra);
    try {
      run(c, std::move(tier));
      FAIL() << "the pools held more than engine.host_memory";
    } catch (const OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("memory pools hold"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("engine.host_memory"), std::string::npos) << e.what();
    }
  }
}

// The emulated tier leaves engine.overlap_adam's "auto" off: the worker would share the cores the
// forward runs on.
TEST_F(ChunkedEngineOnATier, OverlapAdamAutoIsOffOnTheEmulatedTier) {
  auto c = small_config(/*bf16=*/true);
  c.training.steps = 3;
  ASSERT_EQ(c.engine.overlap_adam, config::OnOffAuto::kAuto);
  for (const auto& m : run(c, nullptr)) {
    EXPECT_EQ(m.engine.adam.queued_chunks, -1);
    EXPECT_EQ(m.engine.adam.early_chunks, -1);
    EXPECT_EQ(m.engine.adam.wait_s, -1);
  }
}

// The CUDA tier's arena can be smaller than what the budget leaves for chunks: the margin and the
// working set then stay inside it, and the numbers do not change.
TEST_F(ChunkedEngineOnATier, DeviceCapacityBelowTheBudgetBoundsDeviceMemory) {
  auto c = small_config(/*bf16=*/true);
  Plan plan;
  const auto reference = run(c, nullptr, nullptr, &plan);
  const int64_t capacity = 4 * plan.compute_chunk_bytes;
  auto ledger = std::make_shared<Ledger>();
  const auto limited = run(c, std::make_unique<CheckingTier>(ledger, capacity));
  EXPECT_EQ(losses(limited), losses(reference));
  EXPECT_LE(ledger->peak_device_bytes, capacity);
  EXPECT_GT(ledger->copied[1][0], 0) << "the capacity forced no moves";
  for (const auto& v : ledger->violations) ADD_FAILURE() << v;
}

// Note [device footprint]: where a tier sets memory aside for payloads, keeps scratch and reserves
// more than LibTorch allocates (the CUDA tier), device_reserved_peak_bytes is their sum with the
// largest reserved figure of the step's windows, while device_peak_bytes stays what the plan
// counts; the numbers do not change.
TEST_F(ChunkedEngineOnATier, ReservedPeakAddsTheTiersReservesToTheReservedNonModelPeak) {
  auto c = small_config(/*bf16=*/true);
  c.training.steps = 4;
  const auto reference = run(c, nullptr);
  auto ledger = std::make_shared<Ledger>();
  auto tier = std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
  DeviceTier::Footprint footprint;
  footprint.payload_reserve_bytes = 96 << 20;
  footprint.scratch_bytes = 3 << 20;
  footprint.context_bytes = 500 << 20;  // reported, not counted against the budget
  const int64_t extra = 7 << 20;
  tier->set_footprint(footprint, extra);
  const auto checked = run(c, std::move(tier), [&](const train::StepMetrics& m) {
    int64_t reserved = 0;
    {
      const std::lock_guard<std::mutex> lock(ledger->mutex);
      reserved = ledger->reported_reserved_peak;
      ledger->reported_reserved_peak = 0;
    }
    EXPECT_GE(reserved, extra) << "step " << m.step;
    EXPECT_EQ(m.engine.device_reserved_peak_bytes,
              footprint.payload_reserve_bytes + footprint.scratch_bytes + reserved)
        << "step " << m.step;
    EXPECT_LT(m.engine.device_peak_bytes, m.engine.device_reserved_peak_bytes) << "step " << m.step;
  });
  EXPECT_EQ(losses(checked), losses(reference));
  for (size_t i = 0; i < checked.size(); ++i)
    EXPECT_EQ(checked[i].engine.device_peak_bytes, reference[i].engine.device_peak_bytes)
        << "step " << i + 1;
}

// A checking tier of its own per test, on the test's thread (the driving one).
class CheckingTierStreams : public ::testing::Test {
 protected:
  Block device_block(int64_t bytes = 256) { return tier.allocate(Side::kDevice, bytes); }

  std::shared_ptr<Ledger> ledger = std::make_shared<Ledger>();
  CheckingTier tier{ledger, std::numeric_limits<int64_t>::max()};
};

// Note [communication stream]: the checking tier holds the engine to the rule that nothing
// touches a collective's buffers between the collective's mark and its end. A copy into the buffer
// before the mark is the collective's input; one after it is a violation (on a GPU it would run
// beside the collective, on another stream); one into another block, or after the end, is not.
TEST_F(CheckingTierStreams, ATouchAfterTheMarkOfACollectiveThatUsesItIsAViolation) {
  Block source = device_block();
  Block buffer = device_block();
  Block other = device_block();
  const auto collective = [&](const StreamMark* mark) {
    std::thread comm([&] {
      const std::unique_ptr<CommStreamScope> scope = tier.enter_comm_stream(mark);
      ledger->in_flight_locked(buffer.data(), 256);
      scope->finish();
    });
    comm.join();
  };
  tier.copy(buffer, source, 256);  // the input, before the mark
  std::shared_ptr<const StreamMark> mark = tier.mark_compute();
  tier.copy(other, source, 256);
  collective(mark.get());
  EXPECT_TRUE(ledger->violations.empty()) << ledger->violations.front();
  tier.copy(other, buffer, 256);  // after the end: no collective uses it any more

  mark = tier.mark_compute();
  tier.copy(buffer, source, 128);  // between the mark and the end
  collective(mark.get());
  ASSERT_EQ(ledger->violations.size(), 1U);
  EXPECT_NE(ledger->violations[0].find("a copy's destination touched a collective's buffer"),
            std::string::npos)
      << ledger->violations[0];
  EXPECT_EQ(ledger->marks, 2);
  EXPECT_EQ(ledger->comm_scopes, 2);
  mark.reset();
  EXPECT_TRUE(ledger->open_marks.empty());
}

// The engine declares to the scope what its collective's work uses beyond what the communicator
// sees (CommStreamScope::uses: the gradients a reduction reads, the sum it writes), and the
// checking tier holds those ranges as it holds the communicator's: a write before the mark is the
// input, one between the mark and the end a violation.
TEST_F(CheckingTierStreams, RangesTheEngineDeclaresAreHeldToo) {
  Block source = device_block();
  Block grad = device_block();
  Block sum = device_block();
  tier.copy(grad, source, 256);  // the gradient, complete before the mark
  std::shared_ptr<const StreamMark> mark = tier.mark_compute();
  tier.copy(sum, source, 64);  // into the sum the collective writes, after the mark
  std::thread comm([&] {
    const std::unique_ptr<CommStreamScope> scope = tier.enter_comm_stream(mark.get());
    scope->uses(grad.data(), 256);
    scope->uses(sum.data(), 256);
    scope->finish();
  });
  comm.join();
  ASSERT_EQ(ledger->violations.size(), 1U);
  EXPECT_NE(ledger->violations[0].find("a copy's destination touched a collective's buffer"),
            std::string::npos)
      << ledger->violations[0];
  EXPECT_EQ(ledger->declared_uses, 2);
}

// The checking tier also refuses a scope without a mark, a scope on the driving thread, and a
// collective outside any scope.
TEST_F(CheckingTierStreams, ScopesNeedAMarkAndAThreadOfTheirOwn) {
  Block buffer = device_block(64);
  ledger->in_flight_locked(buffer.data(), 64);
  const std::unique_ptr<CommStreamScope> scope = tier.enter_comm_stream(nullptr);
  scope->finish();
  ASSERT_EQ(ledger->violations.size(), 3U);
  EXPECT_EQ(ledger->violations[0], "a collective outside a communication stream's scope");
  EXPECT_EQ(ledger->violations[1], "a communication scope without a mark");
  EXPECT_EQ(ledger->violations[2], "the communication stream entered on the driving thread");
}

// The batched sum of squares gives every buffer the bits of its own call (the CUDA tier's own is
// checked on a GPU in SqSumKernelStreamTest).
TEST(DeviceTierSums, BatchedSumsMatchOneCallEach) {
  auto tier = make_emulated_tier();
  std::vector<Block> blocks;
  std::vector<DeviceTier::GradRef> grads;
  const int64_t sizes[] = {1, 65536 + 3, 0, 300001};
  for (int64_t n : sizes) {
    blocks.push_back(tier->allocate(Side::kDevice, std::max<int64_t>(n, 1) * 4));
    auto v = tier->view(blocks.back(), c10::kFloat, 0, {std::max<int64_t>(n, 1)});
    v.copy_(torch::randn({std::max<int64_t>(n, 1)}));
    grads.push_back({blocks.back().data(), optim::GradType::kF32, n});
  }
  std::vector<double> out(grads.size(), -1.0);
  tier->grad_sq_sums(Side::kDevice, grads, out.data());
  for (size_t i = 0; i < grads.size(); ++i) {
    const double one =
        tier->grad_sq_sum(Side::kDevice, grads[i].grad, grads[i].grad_type, grads[i].numel);
    EXPECT_EQ(out[i], one) << "buffer " << i;
    // Against float64, independently of the kernel's order.
    const double ref = grads[i].numel == 0 ? 0.0
                                           : tier->view(blocks[i], c10::kFloat, 0, {grads[i].numel})
                                                 .to(torch::kDouble)
                                                 .pow(2)
                                                 .sum()
                                                 .item<double>();
    EXPECT_NEAR(out[i], ref, 1e-9 * std::max(1.0, ref)) << "buffer " << i;
  }
}

TEST(DeviceArenaBytes, LeavesThePredictionAndTheUnfilledShareToLibTorch) {
  config::TrainConfig c;
  c.engine.device_memory = 1000 << 20;
  const int64_t budget = *c.engine.device_memory;
  // 90% of 1000 MiB, less the prediction: the plans fill no more than that, and the other 10% is
  // LibTorch's (its cached blocks).
  const int64_t fill = 900 << 20;
  ASSERT_EQ(static_cast<int64_t>(plan::device_fill_bytes(budget)), fill);
  const plan::RunPlan p = pstar::testing::cpu_plan(c);
  EXPECT_EQ(engine::ChunkedEngine::device_arena_bytes(p, 0), fill);
  EXPECT_EQ(engine::ChunkedEngine::device_arena_bytes(p, 300 << 20), fill - (300 << 20));
  EXPECT_EQ(engine::ChunkedEngine::device_arena_bytes(p, fill - 1), 1);
  EXPECT_THROW(engine::ChunkedEngine::device_arena_bytes(p, fill), OutOfMemoryError);
}

// Note [library workspaces]: nothing to measure on the CPU; a build without the CUDA tier says so
// when asked for a GPU's (the GPU side:
// CudaTraining.LibraryWorkspacesAreMeasuredOnceBeforeTheArena).
TEST(LibraryWorkspaces, NoneOnTheCpuAndNoCudaWithoutTheTier) {
  EXPECT_EQ(library_workspace_bytes(c10::Device(c10::kCPU), c10::kFloat), 0);
  EXPECT_EQ(library_workspace_bytes(c10::Device(c10::kCPU), c10::kBFloat16), 0);
  if (cuda_tier_built()) GTEST_SKIP() << "this build has the CUDA tier (the gpu tests cover it)";
  EXPECT_THROW(library_workspace_bytes(c10::Device("cuda:0"), c10::kFloat), ConfigError);
}

TEST(ComputeDevice, ChunkEngineOnCudaNeedsTheCudaTier) {
  if (cuda_tier_built()) GTEST_SKIP() << "this build has the CUDA tier";
  config::TrainConfig c;
  c.engine.mode = config::EngineMode::kChunked;
  EXPECT_TRUE(train::compute_device(c, "cpu").is_cpu());
  EXPECT_TRUE(train::compute_device(c, "auto").is_cpu());
  try {
    train::compute_device(c, "cuda");
    FAIL() << "--device cuda was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device tier"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::compute_device(c, "tpu"), ConfigError);
}

}  // namespace
}  // namespace pstar::tier
