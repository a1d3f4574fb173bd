// Note [speculative adam] on the checking tier: with the host's Adam queued on the worker and made
// slower than a module's forward, speculation forced on, every step's losses, gradient norms and
// the final optimizer state equal those of Adam run in place without the worker, bit for bit,
// whether steps clip always, sometimes or never; the metrics count what was speculated, redone
// and cancelled, and every speculated span is stored non-temporally; nothing touches a chunk while
// its speculative Adam or its redo runs (the checking tier flags overlaps; reads may share what an
// Adam out of place only reads); the gradient norm takes the sums of squares the worker has not
// started; a step without an update drops its speculation; too little host room gives fewer
// rollback slots, not other numbers. And what speculation may not cost (issue 56): a rollback is
// one more pass and nothing else is, speculation stops once the sums show the step clips, the
// forward never waits behind a chunk it needs later, a steady step allocates, trims and
// synchronises nothing, and "auto" that never speculates makes no slots.
#include <gtest/gtest.h>

#include "engine/tier/checking_tier.h"
#include "pstar/engine/param_engine.h"

namespace pstar::tier {
namespace {

using testing::CheckingTier;
using testing::ChunkedEngineOnATier;
using testing::Ledger;

class SpeculativeAdam : public ChunkedEngineOnATier {
 protected:
  struct Outcome {
    std::vector<train::StepMetrics> steps;
    StateBytes state;
    std::shared_ptr<Ledger> ledger;
  };

  // A tight budget (chunks move and are prefetched, so uploads, Adam and its redo compete for the
  // same chunks) found from an unconstrained run.
  int64_t tight_budget(const config::TrainConfig& c) {
    Plan plan;
    run(c, nullptr, nullptr, &plan);
    return plan.non_model_peak + 4 * plan.compute_chunk_bytes + plan.compute_chunk_bytes / 2;
  }

  // bf16, `steps` steps, a clip no step reaches (the norm needed, nothing rolled back), and the
  // plan of an unconstrained run of it.
  config::TrainConfig config_and_plan(int64_t steps, Plan* plan) {
    auto c = small_config(/*bf16=*/true);
    c.training.steps = steps;
    c.gradient_clipping = 1e9;
    run(c, nullptr, nullptr, plan);
    return c;
  }

  Outcome in_place(config::TrainConfig c) {
    c.engine.overlap_adam = config::OnOffAuto::kOff;
    c.engine.speculative_adam = config::OnOffAuto::kOff;
    Outcome out;
    out.steps = run(c, nullptr, nullptr, nullptr, &out.state);
    return out;
  }

  Outcome speculated(config::TrainConfig c) {
    c.engine.overlap_adam = config::OnOffAuto::kOn;
    c.engine.speculative_adam = config::OnOffAuto::kOn;
    Outcome out;
    out.ledger = std::make_shared<Ledger>();
    auto tier = std::make_unique<CheckingTier>(out.ledger, std::numeric_limits<int64_t>::max());
    tier->set_off_thread_adam_delay(std::chrono::milliseconds(3));
    out.steps = run(c, std::move(tier), nullptr, nullptr, &out.state);
    return out;
  }

  static void expect_same(const Outcome& got, const Outcome& want) {
    ASSERT_EQ(got.steps.size(), want.steps.size());
    for (size_t i = 0; i < want.steps.size(); ++i) {
      EXPECT_EQ(got.steps[i].loss, want.steps[i].loss) << "step " << i + 1;
      EXPECT_EQ(got.steps[i].grad_norm, want.steps[i].grad_norm) << "step " << i + 1;
    }
    ASSERT_EQ(got.state.size(), want.state.size());
    for (size_t i = 0; i < want.state.size(); ++i) {
      EXPECT_EQ(got.state[i].first, want.state[i].first);
      EXPECT_TRUE(got.state[i].second == want.state[i].second) << want.state[i].first;
    }
    const std::lock_guard<std::mutex> lock(got.ledger->mutex);
    EXPECT_TRUE(got.ledger->busy.empty());
    EXPECT_TRUE(got.ledger->reading.empty());
    for (const auto& v : got.ledger->violations) ADD_FAILURE() << v;
  }

  struct Counts {
    int64_t speculated = 0, rolled_back = 0, cancelled = 0, clipped = 0;
  };
  static Counts counts(const Outcome& o, double clip) {
    Counts n;
    for (const auto& m : o.steps) {
      const auto& a = m.engine.adam;
      EXPECT_GE(a.speculated_chunks, 0) << "step " << m.step;
      n.speculated += a.speculated_chunks;
      n.rolled_back += a.rolled_back_chunks;
      n.cancelled += a.cancelled_chunks;
      n.clipped += m.grad_norm > clip ? 1 : 0;
      // A step that clipped redoes every chunk whose speculative update ran and cancels the rest;
      // one that did not, neither.
      if (m.grad_norm > clip) {
        EXPECT_EQ(a.rolled_back_chunks + a.cancelled_chunks, a.speculated_chunks)
            << "step " << m.step;
      } else {
        EXPECT_EQ(a.rolled_back_chunks + a.cancelled_chunks, 0) << "step " << m.step;
      }
    }
    return n;
  }
  // Every planned step's figures after `from`.
  static std::vector<const train::StepMetrics*> from_step(const Outcome& o, int64_t from) {
    std::vector<const train::StepMetrics*> out;
    for (const auto& m : o.steps)
      if (m.step >= from) out.push_back(&m);
    return out;
  }
};

TEST_F(SpeculativeAdam, BitIdenticalWhetherStepsClipAlwaysSometimesOrNever) {
  struct Case {
    const char* name;
    bool bf16;
    int64_t accumulation;
    double clip;  // relative to the unclipped run's median gradient norm
  };
  for (const Case& k :
       {Case{"bf16 clipping always", true, 1, 0.01}, Case{"bf16 clipping never", true, 1, 1e9},
        Case{"bf16 clipping sometimes", true, 1, 1.0},
        Case{"fp32 clipping sometimes", false, 1, 1.0},
        Case{"bf16 accumulating, clipping sometimes", true, 2, 1.0}}) {
    SCOPED_TRACE(k.name);
    auto c = small_config(k.bf16);
    c.training.steps = 8;
    c.gradient_accumulation_steps = k.accumulation;
    c.engine.device_memory = tight_budget(c);
    // The norms of a run without clipping put the clip where the steps fall on both sides of it.
    std::vector<double> norms;
    for (const auto& m : in_place(c).steps) norms.push_back(m.grad_norm);
    std::sort(norms.begin(), norms.end());
    c.gradient_clipping = k.clip * norms[norms.size() / 2];
    const Outcome want = in_place(c);
    const Outcome got = speculated(c);
    expect_same(got, want);
    const Counts n = counts(got, c.gradient_clipping);
    EXPECT_GT(n.speculated, 0) << "nothing was speculated";
    // Note [streaming stores]: each speculated span, stored non-temporally from its first element
    // (under PSTAR_ADAM_STREAMING=0 nothing is speculated, and the checks of it fail).
    EXPECT_EQ(got.ledger->adam_out_of_place_streamed, got.ledger->adam_out_of_place);
    // The norm took the sums the slowed worker had not started (over 8 steps, some always are),
    // and its numbers are the worker's, bit for bit (expect_same above).
    EXPECT_GT(got.ledger->sums_on_owner_thread, 0);
    double early_s = 0;
    for (const auto& m : got.steps) early_s += std::max(0.0, m.engine.adam.early_s);
    if (k.clip < 1) {
      // Each chunk's own sum passes the clip: every speculative update is cancelled unstarted.
      EXPECT_EQ(n.cancelled, n.speculated) << "every step clips";
      EXPECT_EQ(got.ledger->adam_out_of_place, 0);
    } else {
      EXPECT_GT(got.ledger->adam_out_of_place, 0);
      EXPECT_GT(early_s, 0) << "no host Adam started in the backward";
    }
    if (k.clip > 1e6) {
      EXPECT_EQ(n.rolled_back, 0) << "no step clips";
    }
    if (k.clip == 1.0) {
      EXPECT_GT(n.clipped, 0);
      EXPECT_LT(n.clipped, c.training.steps);
    }
  }
}

// Too little host room beside the chunks: fewer rollback slots (maybe none), the same numbers.
TEST_F(SpeculativeAdam, AHostBudgetWithoutRoomGivesFewerSlotsNotOtherNumbers) {
  Plan plan;
  auto c = config_and_plan(6, &plan);
  c.engine.device_memory = tight_budget(c);
  const int64_t whole = plan.compute_chunk_bytes + plan.optimizer_chunk_bytes;
  // Every chunk on the host, plus room for about one slot.
  c.engine.host_memory = plan.num_chunks * whole + whole + whole / 2;
  const Outcome want = in_place(c);
  const Outcome got = speculated(c);
  expect_same(got, want);
  int64_t most = 0;
  for (const auto& m : got.steps) most = std::max(most, m.engine.adam.speculated_chunks);
  EXPECT_GE(most, 1);
  EXPECT_LE(most, 1) << "more slots than the host budget holds";
}

// Note [host adam bytes], with every chunk's Adam on the host: every step runs one host Adam pass
// per chunk and reads and writes every payload byte once, in place (overlap off), with exact early
// updates (no clipping) and speculating on steps that never clip, alike; a step that clips adds
// exactly one pass per rolled-back chunk, and a cancelled speculation adds none.
TEST_F(SpeculativeAdam, ARollbackIsOneMorePassAndNothingElseIs) {
  for (const bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto c = small_config(bf16);
    c.training.steps = 8;
    c.engine.device_memory = tight_budget(c);
    Plan plan;
    run(c, nullptr, nullptr, &plan);
    const int64_t whole_per_element =
        (plan.compute_chunk_bytes + plan.optimizer_chunk_bytes) / plan.chunk_size;
    EXPECT_EQ(whole_per_element, bf16 ? 14 : 16);
    const auto expect_one_pass_each = [&](const Outcome& o, const char* what) {
      for (const auto& m : o.steps) {
        ASSERT_EQ(m.engine.adam.device_chunks, 0) << "the budget leaves no device margin";
        EXPECT_EQ(m.engine.adam.host_passes, plan.num_chunks) << what << ", step " << m.step;
        EXPECT_EQ(m.engine.adam.host_bytes, 2 * whole_per_element * plan.params)
            << what << ", step " << m.step;
        EXPECT_EQ(m.engine.adam.norm_host_bytes, plan.params * (bf16 ? 2 : 4)) << what;
      }
    };
    c.gradient_clipping = 0;  // exact early updates
    expect_one_pass_each(speculated(c), "no clipping");
    c.gradient_clipping = 1e9;  // the norm is needed, no step clips
    const Outcome calm = speculated(c);
    expect_one_pass_each(calm, "speculating, nothing clips");
    EXPECT_GT(counts(calm, c.gradient_clipping).speculated, 0);
    // At the median norm some steps clip, late enough in the backward for updates to have run.
    std::vector<double> norms;
    for (const train::StepMetrics* m : from_step(in_place(c), 3)) norms.push_back(m->grad_norm);
    std::sort(norms.begin(), norms.end());
    c.gradient_clipping = norms[norms.size() / 2];
    expect_one_pass_each(in_place(c), "in place");
    const Outcome clipping = speculated(c);
    const Counts n = counts(clipping, c.gradient_clipping);
    EXPECT_GT(n.rolled_back, 0) << "no speculative update ran before its step clipped";
    for (const auto& m : clipping.steps) {
      const auto& a = m.engine.adam;
      EXPECT_EQ(a.host_passes, plan.num_chunks + a.rolled_back_chunks) << "step " << m.step;
      EXPECT_GE(a.host_bytes, 2 * whole_per_element * plan.params) << "step " << m.step;
      EXPECT_EQ(a.host_bytes > 2 * whole_per_element * plan.params, a.rolled_back_chunks > 0)
          << "step " << m.step;
    }
  }
}

// Note [speculative adam]: with a clip below every chunk's own share of the norm, the first sum of
// squares the worker computes shows that the step clips; every speculative update is cancelled
// before it starts (its chunk's sum runs first) and the chunks are updated once, after the norm:
// nothing is rolled back, and no pass is added. Without the bound, every one would be redone.
TEST_F(SpeculativeAdam, SpeculationStopsOnceTheSumsShowTheStepClips) {
  auto c = small_config(/*bf16=*/true);
  c.training.steps = 5;
  c.engine.device_memory = tight_budget(c);
  c.gradient_clipping = 1e-6;
  Plan plan;
  run(c, nullptr, nullptr, &plan);
  const Outcome want = in_place(c);
  const Outcome got = speculated(c);
  expect_same(got, want);
  const Counts n = counts(got, c.gradient_clipping);
  EXPECT_GT(n.speculated, 0);
  EXPECT_EQ(n.rolled_back, 0);
  EXPECT_EQ(n.cancelled, n.speculated);
  EXPECT_EQ(got.ledger->adam_out_of_place, 0) << "a speculative update ran";
  for (const auto& m : got.steps) EXPECT_EQ(m.engine.adam.host_passes, plan.num_chunks);
}

// Note [speculative adam]: forward order. Host Adam slowed well past a module's compute, so that
// the next forward finds updates still queued: it waits for them, and every wait is for the job
// next in line (no other chunk's job queued ahead of it), speculating or waiting for the norm. In
// gradient order the forward's first chunk would wait behind every chunk speculated before it.
TEST_F(SpeculativeAdam, TheForwardNeverWaitsBehindAChunkItNeedsLater) {
  for (const bool speculate : {true, false}) {
    SCOPED_TRACE(speculate ? "speculating" : "waiting for the norm");
    auto c = small_config(/*bf16=*/true);
    c.training.steps = 6;
    c.engine.device_memory = tight_budget(c);
    c.gradient_clipping = 1e9;
    if (!speculate) c.engine.speculative_adam = config::OnOffAuto::kOff;
    Outcome got = speculate ? speculated(c) : Outcome{};
    if (!speculate) {
      c.engine.overlap_adam = config::OnOffAuto::kOn;
      auto ledger = std::make_shared<Ledger>();
      auto tier = std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
      tier->set_off_thread_adam_delay(std::chrono::milliseconds(3));
      got.steps = run(c, std::move(tier));
    }
    double waited_s = 0;
    for (const train::StepMetrics* m : from_step(got, 3)) {
      EXPECT_EQ(m->engine.adam.waited_behind, 0) << "step " << m->step;
      waited_s += m->engine.adam.wait_s;
    }
    EXPECT_GT(waited_s, 0) << "the forward found no update queued: nothing was checked";
    if (speculate) {
      EXPECT_GT(counts(got, c.gradient_clipping).speculated, 0);
    }
  }
}

// Note [speculative adam]: nothing allocated at steady state. Under the default budget, and on a
// checking tier that keeps a host block a copy to the device read from its pool through the next
// host allocation (as the CUDA tier keeps it until the copy has run), under a host budget that
// leaves room for two rollback slots beside what the pools hold at a step's end (so not beside
// what they need within one, at the optimizer step), the steps after the slots are made take
// nothing from the system, trim nothing and synchronise nothing.
TEST_F(SpeculativeAdam, ASteadyStepAllocatesTrimsAndSynchronisesNothing) {
  Plan plan;
  auto c = config_and_plan(7, &plan);
  // Room for a device margin of a chunk or two: the plan promotes them as the warm-up ends and
  // trims the host blocks they leave, so the pools then hold only the payloads in use, not what a
  // step needs while copies are in flight.
  c.engine.device_memory =
      tight_budget(c) + 3 * (plan.compute_chunk_bytes + plan.optimizer_chunk_bytes);
  c.engine.overlap_adam = config::OnOffAuto::kOn;
  c.engine.speculative_adam = config::OnOffAuto::kOn;
  const auto expect_steady = [&](const std::vector<train::StepMetrics>& steps, const char* what) {
    int64_t speculated = 0;
    // Slots are made at step 3, the second planned one; step 4 on is steady.
    for (const auto& m : steps) {
      speculated += std::max<int64_t>(0, m.engine.adam.speculated_chunks);
      if (m.step < 4) continue;
      EXPECT_EQ(m.engine.steady.pool_allocated_bytes, 0) << what << ", step " << m.step;
      EXPECT_EQ(m.engine.steady.pool_trims, 0) << what << ", step " << m.step;
      EXPECT_EQ(m.engine.steady.device_syncs, 0) << what << ", step " << m.step;
    }
    EXPECT_GT(speculated, 0) << what;
  };
  expect_steady(run(c, nullptr), "the default budget");

  const int64_t slot = plan.compute_chunk_bytes + plan.optimizer_chunk_bytes;  // bf16: 14 B each
  auto ledger = std::make_shared<Ledger>();
  auto checking = [&] {
    auto tier = std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
    tier->set_off_thread_adam_delay(std::chrono::milliseconds(3));
    tier->set_deferred_host_release(true);
    return tier;
  };
  // What the pools hold at the end of the warm-up, trimmed to the payloads in use (the default
  // tier returns every block at once).
  int64_t held = 0, margin = 0;
  run(c, nullptr, [&](const train::StepMetrics& m) {
    if (m.step == 1) held = m.engine.pinned.current + m.engine.pageable.current;
    margin = m.engine.adam.device_chunks;
  });
  ASSERT_GT(held, 0);
  ASSERT_GT(margin, 0) << "no margin: the warm-up trims nothing";
  c.engine.host_memory = held + 2 * slot + plan.compute_chunk_bytes / 2;
  expect_steady(run(c, checking()), "a host budget two slots above the payloads");
  EXPECT_GT(ledger->retired_blocks, 0) << "no release was deferred: the pools needed no more";
}

// Note [speculation by cost]: slots are provisioned only when speculation is chosen. Where every
// step clips, "auto" never speculates and its run holds less host memory than one slot above the
// same run with speculation off; forced on, the same run holds its slots beside (and cancels every
// speculative update: the first sum shows the step clips).
TEST_F(SpeculativeAdam, AutoThatNeverSpeculatesMakesNoSlots) {
  Plan plan;
  auto c = config_and_plan(8, &plan);
  c.engine.device_memory = tight_budget(c);
  c.gradient_clipping = 1e-6;
  c.engine.overlap_adam = config::OnOffAuto::kOn;
  const int64_t slot = plan.compute_chunk_bytes + plan.optimizer_chunk_bytes;  // bf16: 14 B each
  struct Held {
    int64_t host_peak = 0, speculated = 0;
  };
  const auto held = [&](config::OnOffAuto speculate) {
    c.engine.speculative_adam = speculate;
    Held h;
    for (const auto& m : run(c, nullptr)) {
      h.host_peak = std::max(h.host_peak, m.engine.host_peak_bytes);
      h.speculated += std::max<int64_t>(0, m.engine.adam.speculated_chunks);
    }
    return h;
  };
  const Held off = held(config::OnOffAuto::kOff);
  const Held automatic = held(config::OnOffAuto::kAuto);
  const Held forced = held(config::OnOffAuto::kOn);
  ASSERT_GT(off.host_peak, 0);
  EXPECT_EQ(off.speculated, 0);
  EXPECT_EQ(automatic.speculated, 0) << "\"auto\" speculated steps that all clip";
  EXPECT_LT(automatic.host_peak, off.host_peak + slot) << "\"auto\" made a slot it never used";
  EXPECT_GT(forced.speculated, 0);
  EXPECT_GE(forced.host_peak, off.host_peak + slot) << "no slot: the comparison shows nothing";
}

// Speculation asked for by name with no host room for one slot is a plan that does not fit, said
// at the first step that would speculate, with the budget that would hold one; "auto" runs
// without it.
TEST_F(SpeculativeAdam, ForcedWithoutRoomForOneSlotStopsAtItsFirstStepAutoRunsWithout) {
  auto c = small_config(/*bf16=*/true);
  c.training.steps = 4;
  c.gradient_clipping = 1.0;
  Plan plan;
  run(c, nullptr, nullptr, &plan);
  c.engine.device_memory = tight_budget(c);
  const int64_t whole = plan.compute_chunk_bytes + plan.optimizer_chunk_bytes;
  c.engine.host_memory = plan.num_chunks * whole + whole / 4;
  const Outcome want = in_place(c);
  try {
    speculated(c);
    ADD_FAILURE() << "speculative_adam true ran without room for a rollback slot";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("engine.host_memory"), std::string::npos) << what;
    EXPECT_NE(what.find("engine.speculative_adam"), std::string::npos) << what;
    EXPECT_NE(what.find("at least"), std::string::npos) << what;
  }
  c.engine.speculative_adam = config::OnOffAuto::kAuto;
  c.engine.overlap_adam = config::OnOffAuto::kOn;
  std::vector<train::StepMetrics> got = run(c, nullptr);
  ASSERT_EQ(got.size(), want.steps.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].loss, want.steps[i].loss) << "step " << i + 1;
    EXPECT_LE(got[i].engine.adam.speculated_chunks, 0) << "step " << i + 1;
  }
}

// A step without an update (as after an fp16 overflow, which this CPU build cannot make): its
// speculation is dropped and the parameters come back from untouched masters. The engine is
// driven here as the trainer drives it, with update() left out of step 4.
TEST_F(SpeculativeAdam, AStepWithoutAnUpdateDropsItsSpeculation) {
  auto c = small_config(/*bf16=*/true);
  c.training.steps = 6;
  c.gradient_clipping = 1e9;
  c.engine.device_memory = tight_budget(c);
  auto drive = [&](bool speculate) {
    c.engine.overlap_adam = speculate ? config::OnOffAuto::kOn : config::OnOffAuto::kOff;
    c.engine.speculative_adam = speculate ? config::OnOffAuto::kOn : config::OnOffAuto::kOff;
    auto ledger = std::make_shared<Ledger>();
    auto tier = std::make_unique<CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
    tier->set_off_thread_adam_delay(std::chrono::milliseconds(3));
    std::vector<double> out;
    int64_t speculated = 0;
    run_engine_steps(
        c, std::move(tier),
        [&](engine::ParamEngine& e, int64_t step, const std::function<double()>& forward_backward) {
          e.begin_step();
          if (speculate) e.speculate_update(1e-3, 1.0, /*max_norm=*/0);
          const double loss = forward_backward();
          const double norm = e.grad_norm(1.0);
          if (step != 4) e.update(1e-3, 1.0);
          e.end_step();
          train::StepMetrics m;
          e.fill_metrics(m.engine);
          if (step == 4) {
            EXPECT_GE(m.engine.adam.speculated_chunks, speculate ? 1 : -1);
          }
          speculated += std::max<int64_t>(0, m.engine.adam.speculated_chunks);
          out.push_back(loss);
          out.push_back(norm);
        });
    const std::lock_guard<std::mutex> lock(ledger->mutex);
    EXPECT_TRUE(ledger->busy.empty());
    for (const auto& v : ledger->violations) ADD_FAILURE() << v;
    if (speculate) {
      EXPECT_GT(speculated, 0);
    }
    return out;
  };
  EXPECT_EQ(drive(true), drive(false));
}

}  // namespace
}  // namespace pstar::tier
