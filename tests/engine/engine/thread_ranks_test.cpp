// ZeRO on four ranks without processes: each rank a thread of this process with the thread double
// of the communicator (engine/dist/thread_ranks.h), the chunk engine and the trainer exactly as
// `pstar train --nproc 4` runs them. Checks what the forked-process tests cannot see from outside:
// which chunks each rank owns (a quarter each, every parameter once, at the offsets a one-rank
// model has them, with its values), the collectives each step issues, and losses that track one
// rank.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/dist/thread_ranks.h"
#include "engine/engine/owned_parameters.h"
#include "engine/small_gpt_config.h"
#include "engine/step_losses.h"
#include "engine/tier/checking_tier.h"
#include "pstar/base/strings.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

constexpr int kRanks = 4;
constexpr int64_t kSteps = 4, kGlobalBatch = 4;

// What one rank saw.
struct RankRun {
  std::vector<std::string> owned;  // parameter names whose chunk this rank owns
  std::vector<StepMetrics> steps;
};

TEST(ThreadRanksTest, FourRanksOwnAQuarterEachAndTrackOneRank) {
  pstar::testing::ScratchDir dir;
  config::TrainConfig c = pstar::testing::small_gpt_config_in(dir);
  c.training.steps = kSteps;
  c.train_micro_batch_size_per_gpu = kGlobalBatch;
  c.train_batch_size = kGlobalBatch;
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;

  // One rank, and the initial model it holds.
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
  std::vector<StepMetrics> one;
  {
    Trainer trainer(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
    while (trainer.steps_done() < kSteps) one.push_back(trainer.step());
  }
  const int64_t whole_model_data = one.back().engine.model_data_bytes;

  config::TrainConfig c4 = c;
  c4.train_micro_batch_size_per_gpu = kGlobalBatch / kRanks;
  std::vector<RankRun> runs(kRanks);
  pstar::testing::run_thread_ranks(kRanks, [&](dist::Communicator& comm) {
    RankRun& run = runs[static_cast<size_t>(comm.rank())];
    ModelAndEngine built = build_model_and_engine(pstar::testing::cpu_plan(c4, &comm), &comm);
    auto* engine = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
    if (engine == nullptr) return false;
    const std::string error = pstar::testing::check_owned_parameters(*engine, reference, run.owned);
    if (!error.empty())
      std::fprintf(stderr, "rank %lld: %s\n", static_cast<long long>(comm.rank()), error.c_str());
    TrainOptions ranked = o;
    ranked.comm = &comm;
    Trainer trainer(c4, std::move(built), ranked);
    while (trainer.steps_done() < kSteps) run.steps.push_back(trainer.step());
    return error.empty();
  });
  ASSERT_FALSE(::testing::Test::HasFailure());

  // Every parameter is owned by exactly one rank, and each rank owns about a quarter of the data.
  std::map<std::string, int> owners;
  for (const RankRun& run : runs)
    for (const std::string& name : run.owned) ++owners[name];
  EXPECT_EQ(owners.size(), reference.size());
  for (const auto& [name, count] : owners) EXPECT_EQ(count, 1) << name;
  for (int r = 0; r < kRanks; ++r) {
    const RankRun& run = runs[static_cast<size_t>(r)];
    ASSERT_EQ(run.steps.size(), static_cast<size_t>(kSteps)) << "rank " << r;
    for (const StepMetrics& m : run.steps) {
      // A quarter of the whole, give or take a chunk (about a tenth of this small model).
      EXPECT_NEAR(static_cast<double>(m.engine.model_data_bytes),
                  static_cast<double>(whole_model_data) / kRanks,
                  static_cast<double>(whole_model_data) / 8)
          << "rank " << r << ", step " << m.step;
      EXPECT_GT(m.engine.gathers, 0) << "rank " << r;
      EXPECT_GT(m.engine.reductions, 0) << "rank " << r;
      EXPECT_GT(m.engine.comm_bytes, 0) << "rank " << r;
      // Every rank issues the same collectives (the double would have failed otherwise).
      EXPECT_EQ(m.engine.gathers, runs[0].steps[static_cast<size_t>(m.step - 1)].engine.gathers);
    }
  }
  // The losses are all-reduced, so every rank reports the same; they track one rank's.
  for (int64_t i = 0; i < kSteps; ++i) {
    const double loss = one[static_cast<size_t>(i)].loss;
    for (int r = 0; r < kRanks; ++r) {
      const double got = runs[static_cast<size_t>(r)].steps[static_cast<size_t>(i)].loss;
      EXPECT_NEAR(got, loss, 2e-6 * std::abs(loss)) << "rank " << r << ", step " << i + 1;
    }
  }
}

// How the ranks of the collectives' tests run: each on a checking tier (roomy), whose sides are
// separate memories where `staged`, with the collectives beside compute or each waited for, with a
// device communicator or a host one, and the reduction buffer's cap (Note [flat gathers]).
struct CheckedMode {
  bool staged = false, beside = true, device_comm = false;
  int64_t reduce_buffer_cap = plan::kReduceBufferBytes;
};

// What each rank of such a run saw: its steps, what its checking tier found wrong, and the largest
// flat buffer a reduction handed the communicator.
struct CheckedRun {
  std::vector<std::vector<StepMetrics>> steps;
  std::vector<std::shared_ptr<tier::testing::Ledger>> ledgers;
  std::vector<int64_t> reduce_bytes;
};

// Trains `c` on `ranks` thread ranks in `mode`. Where the sides differ or the communicator is on
// the device, every part a collective moves must lie in a live block of the communicator's side,
// and every reduction buffer in one of the device side (the ledgers' violations say otherwise).
CheckedRun run_checked(const config::TrainConfig& c, int ranks, const CheckedMode& mode) {
  CheckedRun run;
  run.steps.resize(static_cast<size_t>(ranks));
  run.ledgers.resize(static_cast<size_t>(ranks));
  run.reduce_bytes.assign(static_cast<size_t>(ranks), 0);
  pstar::testing::run_thread_ranks(ranks, [&](dist::Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    auto& thread_comm = dynamic_cast<pstar::testing::ThreadCommunicator&>(comm);
    thread_comm.set_on_device(mode.device_comm);
    auto ledger = run.ledgers[r] = std::make_shared<tier::testing::Ledger>();
    // Note [communication stream]: what each collective uses, for the ledger's checks.
    const bool sided = mode.staged || mode.device_comm;
    const tier::Side side = mode.device_comm ? tier::Side::kDevice : tier::Side::kHost;
    thread_comm.set_gather_check(
        [ledger, side, sided](const std::vector<void*>& parts, int64_t bytes) {
          for (const void* part : parts) {
            ledger->in_flight_locked(part, bytes);
            if (sided) ledger->expect_inside_locked(part, bytes, side, "a gathered part");
          }
        });
    thread_comm.set_reduce_check([ledger, &run, r](const float* flat, int64_t bytes) {
      ledger->in_flight_locked(flat, bytes);
      ledger->expect_inside_locked(flat, bytes, tier::Side::kDevice, "a reduction's buffer");
      run.reduce_bytes[r] = std::max(run.reduce_bytes[r], bytes);
    });
    auto checking =
        std::make_unique<tier::testing::CheckingTier>(ledger, std::numeric_limits<int64_t>::max());
    checking->set_host_addresses_device(!mode.staged);
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    o.comm = &comm;
    Trainer trainer(c,
                    tier::testing::build_small_gpt(c, std::move(checking), &comm, mode.beside,
                                                   mode.reduce_buffer_cap),
                    o);
    while (trainer.steps_done() < c.training.steps) run.steps[r].push_back(trainer.step());
    return true;
  });
  return run;
}

// Every run after the first gives the first one's losses, norms and bytes sent, bit for bit.
void expect_same_bits(const std::vector<CheckedRun>& runs) {
  for (size_t i = 1; i < runs.size(); ++i) {
    for (size_t r = 0; r < runs[0].steps.size(); ++r) {
      const std::vector<StepMetrics>& first = runs[0].steps[r];
      const std::vector<StepMetrics>& other = runs[i].steps[r];
      ASSERT_EQ(other.size(), first.size());
      for (size_t s = 0; s < first.size(); ++s) {
        EXPECT_EQ(other[s].loss, first[s].loss)
            << "mode " << i << ", rank " << r << ", step " << s + 1;
        EXPECT_EQ(other[s].grad_norm, first[s].grad_norm) << "mode " << i;
        EXPECT_EQ(other[s].engine.comm_bytes, first[s].engine.comm_bytes) << "mode " << i;
      }
    }
  }
}

// No rank's checking tier saw a violation, and every rank ran its collectives on the
// communication stream, each after a mark (Note [communication stream]).
void expect_no_violations(const CheckedRun& run) {
  for (size_t r = 0; r < run.ledgers.size(); ++r) {
    const tier::testing::Ledger& ledger = *run.ledgers[r];
    EXPECT_TRUE(ledger.violations.empty()) << "rank " << r << ": " << ledger.violations.front();
    EXPECT_GT(ledger.comm_scopes, 0) << "rank " << r;
    EXPECT_EQ(ledger.comm_scopes, ledger.marks) << "rank " << r;
    EXPECT_GE(ledger.declared_uses, ledger.comm_scopes) << "rank " << r;
    EXPECT_TRUE(ledger.open_marks.empty()) << "rank " << r;
  }
}

// Note [staged collectives]: two ranks whose tier says the host cannot address its device side
// (the CUDA tier's case) gather and reduce their device-side payloads through host blocks, beside
// compute or each waited for where it is issued (PSTAR_OVERLAP_COMM=0's schedule). With a device
// communicator (NCCL's side, Note [device collectives]) every group goes through a flat block of
// the device side (Note [flat gathers]), which the remote chunks keep as their payloads or, for
// the host-side ones (the CPU embedding's), are copied out of; and every reduction through one
// flat buffer of the device side. Both are the tier's blocks, and the double refuses parts that
// are not side by side. Their losses and bytes sent are the bits of the same two ranks on a tier
// the host addresses, the staged bytes are counted, and the checking tier sees every kernel told
// the right side.
TEST(ThreadRanksTest, StagedCollectivesGiveTheSameBits) {
  pstar::testing::ScratchDir dir;
  config::TrainConfig c = pstar::testing::small_gpt_config_in(dir);
  c.training.steps = 4;
  c.train_micro_batch_size_per_gpu = 2;
  c.train_batch_size = 4;
  c.bf16.enabled = config::on_off(true);  // param/grad reuse: the gradients in the param payloads
  // Unstaged and staged with the collectives beside compute (Note [collectives beside compute]),
  // and staged with each collective waited for where it is issued.
  const CheckedMode modes[] = {{false, true, false}, {true, true, false}, {true, false, false},
                               {false, true, true},  {true, true, true},  {true, false, true}};
  std::vector<CheckedRun> runs;
  for (const CheckedMode& mode : modes) {
    SCOPED_TRACE(str_cat(mode.staged ? "staged" : "not staged",
                         mode.beside ? ", beside compute" : ", each waited for",
                         mode.device_comm ? ", device communicator" : ""));
    runs.push_back(run_checked(c, 2, mode));
    ASSERT_FALSE(::testing::Test::HasFailure());
    expect_no_violations(runs.back());
    for (size_t r = 0; r < 2; ++r) {
      int64_t ahead = 0;
      for (const StepMetrics& m : runs.back().steps[r]) {
        // A flat block takes a copy of this rank's part (Note [flat gathers]).
        if (mode.staged || mode.device_comm) {
          EXPECT_GT(m.engine.comm_staged_bytes, 0) << "rank " << r << ", step " << m.step;
        } else {
          EXPECT_EQ(m.engine.comm_staged_bytes, 0) << "rank " << r << ", step " << m.step;
        }
        ahead += m.engine.comm_gathers_ahead;
      }
      if (mode.beside) {
        EXPECT_GT(ahead, 0) << "rank " << r;
      } else {
        EXPECT_EQ(ahead, 0) << "rank " << r;
      }
    }
  }
  expect_same_bits(runs);
}

// Note [flat gathers] without param/grad reuse (fp32: each remote chunk keeps a slot of its group's
// flat block as its param payload and a gradient payload of its own), with gradient accumulation
// (one reduction buffer per micro-batch) on four ranks whose tier's sides are separate: a device
// communicator gives the bits of a host one on the same tier, with the same bytes sent, and every
// block it is handed lies in the tier's device side; also with a reduction buffer so small that
// each group is reduced in pieces of 3000 elements per part, the last one shorter.
TEST(ThreadRanksTest, FlatCollectivesGiveTheBitsOfRingOnesInFp32WithAccumulation) {
  pstar::testing::ScratchDir dir;
  config::TrainConfig c = pstar::testing::small_gpt_config_in(dir);
  c.training.steps = 3;
  c.gradient_accumulation_steps = 2;
  c.train_micro_batch_size_per_gpu = 1;
  c.train_batch_size = kRanks * 2;
  c.bf16.enabled = config::on_off(false);
  const CheckedMode modes[] = {{true, true, false, plan::kReduceBufferBytes},
                               {true, true, true, plan::kReduceBufferBytes},
                               {true, true, true, int64_t{kRanks} * 3000 * 4}};
  std::vector<CheckedRun> runs;
  for (const CheckedMode& mode : modes) {
    SCOPED_TRACE(str_cat(mode.device_comm ? "device communicator" : "host communicator",
                         ", reduction buffer cap ", mode.reduce_buffer_cap));
    runs.push_back(run_checked(c, kRanks, mode));
    ASSERT_FALSE(::testing::Test::HasFailure());
    const CheckedRun& run = runs.back();
    expect_no_violations(run);
    for (size_t r = 0; r < kRanks; ++r) {
      ASSERT_EQ(run.steps[r].size(), static_cast<size_t>(c.training.steps));
      for (const StepMetrics& m : run.steps[r]) EXPECT_GT(m.engine.reductions, 0) << "rank " << r;
      // The pieces stay within the cap.
      if (mode.device_comm) {
        EXPECT_GT(run.reduce_bytes[r], 0) << "rank " << r;
        EXPECT_LE(run.reduce_bytes[r], mode.reduce_buffer_cap) << "rank " << r;
      }
    }
  }
  expect_same_bits(runs);
}

}  // namespace
}  // namespace pstar::train
