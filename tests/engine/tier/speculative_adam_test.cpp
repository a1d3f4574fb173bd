// Note [speculative adam] on the checking tier: with the host's Adam queued on the worker and made
// slower than a module's forward, speculation forced on, every step's losses, gradient norms and
// the final optimizer state equal those of Adam run in place without the worker, bit for bit,
// whether steps clip always, sometimes or never; the metrics count what was speculated and
// redone; nothing touches a chunk while its speculative Adam or its redo runs (the checking tier
// flags overlaps; reads may share what an Adam out of place only reads); the gradient norm takes
// the sums of squares the worker has not started; a step without an update drops its
// speculation; too little host room gives fewer rollback slots, not other numbers.
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
    int64_t speculated = 0, rolled_back = 0, clipped = 0;
  };
  static Counts counts(const Outcome& o, double clip) {
    Counts n;
    for (const auto& m : o.steps) {
      EXPECT_GE(m.engine.adam.speculated_chunks, 0) << "step " << m.step;
      EXPECT_LE(m.engine.adam.rolled_back_chunks, m.engine.adam.speculated_chunks);
      n.speculated += m.engine.adam.speculated_chunks;
      n.rolled_back += m.engine.adam.rolled_back_chunks;
      n.clipped += m.grad_norm > clip ? 1 : 0;
      // A step that clipped redoes every chunk it speculated; one that did not, none.
      if (m.grad_norm > clip) {
        EXPECT_EQ(m.engine.adam.rolled_back_chunks, m.engine.adam.speculated_chunks)
            << "step " << m.step;
      } else {
        EXPECT_EQ(m.engine.adam.rolled_back_chunks, 0) << "step " << m.step;
      }
    }
    return n;
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
    EXPECT_GT(got.ledger->adam_out_of_place, 0);
    // The norm took the sums the slowed worker had not started (over 8 steps, some always are),
    // and its numbers are the worker's, bit for bit (expect_same above).
    EXPECT_GT(got.ledger->sums_on_owner_thread, 0);
    if (k.clip < 1) {
      EXPECT_EQ(n.rolled_back, n.speculated) << "every step clips";
    }
    if (k.clip > 1e6) {
      EXPECT_EQ(n.rolled_back, 0) << "no step clips";
    }
    if (k.clip == 1.0) {
      EXPECT_GT(n.clipped, 0);
      EXPECT_LT(n.clipped, c.training.steps);
    }
    double early_s = 0;
    for (const auto& m : got.steps) early_s += std::max(0.0, m.engine.adam.early_s);
    EXPECT_GT(early_s, 0) << "no host Adam started in the backward";
  }
}

// Too little host room beside the chunks: fewer rollback slots (maybe none), the same numbers.
TEST_F(SpeculativeAdam, AHostBudgetWithoutRoomGivesFewerSlotsNotOtherNumbers) {
  auto c = small_config(/*bf16=*/true);
  c.training.steps = 6;
  c.gradient_clipping = 1e9;
  Plan plan;
  run(c, nullptr, nullptr, &plan);
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

// Note [host adam bytes]: with every chunk's Adam on the host, each step reads and writes every
// parameter's whole payload bytes once; a speculative step that clipped runs Adam twice on what
// it speculated.
TEST_F(SpeculativeAdam, HostAdamBytesAreEveryPayloadReadAndWrittenOncePerPass) {
  for (const bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto c = small_config(bf16);
    c.training.steps = 5;
    c.gradient_clipping = 1e-6;  // every step clips: each speculated chunk is redone
    c.engine.device_memory = tight_budget(c);
    Plan plan;
    const std::vector<train::StepMetrics> steps = run(c, nullptr, nullptr, &plan);
    const int64_t whole_per_element =
        (plan.compute_chunk_bytes + plan.optimizer_chunk_bytes) / plan.chunk_size;
    EXPECT_EQ(whole_per_element, bf16 ? 14 : 16);
    for (const auto& m : steps) {
      ASSERT_EQ(m.engine.adam.device_chunks, 0) << "the budget leaves no device margin";
      EXPECT_EQ(m.engine.adam.host_bytes, 2 * whole_per_element * plan.params) << m.step;
    }
    // On the worker a job counts in the step whose engine saw it finish (the next one's for the
    // chunks queued after the norm, and since the norm no longer waits for speculative updates,
    // for those too), so only the sum over the run is bounded: at most every step's pass and the
    // redone chunks' second one; at least every step's pass but the last (whose work may still be
    // queued when the run ends), and more than that, for the chunks redone before the last step.
    const Outcome got = speculated(c);
    int64_t bytes = 0, redone = 0;
    for (const auto& m : got.steps) {
      bytes += m.engine.adam.host_bytes;
      redone += std::max<int64_t>(0, m.engine.adam.rolled_back_chunks);
    }
    const auto steps_run = static_cast<int64_t>(got.steps.size());
    EXPECT_GT(redone, 0);
    EXPECT_LE(bytes, 2 * whole_per_element * (steps_run * plan.params + redone * plan.chunk_size));
    EXPECT_GT(bytes, 2 * whole_per_element * (steps_run - 1) * plan.params);
  }
}

// Speculation asked for by name with no host room for one slot is a plan that does not fit, said
// at start-up with the budget that would; "auto" runs without it.
TEST_F(SpeculativeAdam, ForcedWithoutRoomForOneSlotStopsAtStartUpAutoRunsWithout) {
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
          if (speculate) e.speculate_update(1e-3, 1.0);
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
