// Note [collectives beside compute] (engine/group_sync.h): with the collectives on a communication
// thread (reductions as groups complete, gathers a moment ahead), ranks train to the same bits as
// with every collective on the main thread, send the same bytes in the same collectives, and say
// what went ahead and how long compute waited. Ranks are threads of this process
// (engine/dist/thread_ranks.h) on a checking tier, which lands a copy ahead only when it is awaited
// and reports every block used wrongly.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/dist/thread_ranks.h"
#include "engine/small_gpt_config.h"
#include "engine/tier/checking_tier.h"
#include "pstar/base/strings.h"
#include "pstar/dist/communicator.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

struct Case {
  const char* name;
  int ranks;
  bool bf16;             // param/grad reuse: gradients reduced out of the parameter payloads
  int64_t accumulation;  // fp32 with separate gradient payloads, reduced once per micro-batch
};

// Each rank's steps, training `c` on `ranks` thread ranks.
std::vector<std::vector<StepMetrics>> train_ranks(const config::TrainConfig& c, int ranks,
                                                  bool overlap_comm) {
  std::vector<std::vector<StepMetrics>> steps(static_cast<size_t>(ranks));
  std::vector<std::shared_ptr<tier::testing::Ledger>> ledgers(static_cast<size_t>(ranks));
  pstar::testing::run_thread_ranks(ranks, [&](dist::Communicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    ledgers[r] = std::make_shared<tier::testing::Ledger>();
    // Note [communication stream]: nothing touches a gather's parts between its mark and its end.
    dynamic_cast<pstar::testing::ThreadCommunicator&>(comm).set_gather_check(
        [ledger = ledgers[r]](const std::vector<void*>& parts, int64_t bytes) {
          for (const void* part : parts) ledger->in_flight_locked(part, bytes);
        });
    auto checking = std::make_unique<tier::testing::CheckingTier>(
        ledgers[r], std::numeric_limits<int64_t>::max());
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    o.comm = &comm;
    Trainer trainer(c, tier::testing::build_small_gpt(c, std::move(checking), &comm, overlap_comm),
                    o);
    while (trainer.steps_done() < c.training.steps) steps[r].push_back(trainer.step());
    return true;
  });
  for (size_t r = 0; r < ledgers.size(); ++r) {
    if (ledgers[r] == nullptr) continue;
    EXPECT_TRUE(ledgers[r]->violations.empty())
        << "rank " << r << ": " << ledgers[r]->violations.front();
    EXPECT_GT(ledgers[r]->comm_scopes, 0) << "rank " << r;
    EXPECT_EQ(ledgers[r]->comm_scopes, ledgers[r]->marks) << "rank " << r;
    EXPECT_GE(ledgers[r]->declared_uses, ledgers[r]->comm_scopes) << "rank " << r;
  }
  return steps;
}

TEST(CollectivesBesideCompute, ChangeNoBitAndSendTheSameBytes) {
  pstar::testing::ScratchDir dir;
  const std::string corpus = dir.file("corpus.txt");
  pstar::testing::write_text(corpus, pstar::testing::repetitive_corpus());
  const Case cases[] = {{"2 ranks, bf16", 2, true, 1},
                        {"4 ranks, bf16", 4, true, 1},
                        {"2 ranks, fp32, accumulation 2", 2, false, 2},
                        {"4 ranks, fp32, accumulation 2", 4, false, 2}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    config::TrainConfig c = pstar::testing::small_gpt_config(corpus, "chunked");
    c.training.steps = 4;
    c.train_micro_batch_size_per_gpu = 4 / k.ranks;
    c.gradient_accumulation_steps = k.accumulation;
    c.train_batch_size = 4 * k.accumulation;
    c.bf16.enabled = config::on_off(k.bf16);
    // Chunks move in the warm-up. (The ranks share this process's count of non-model memory, so a
    // budget that moves chunks every step would depend on how the ranks' moments interleave; the
    // multi-process runs of tests/cmd/train_dist_test.cpp move them every step.)
    c.engine.device_memory = int64_t{6} << 20;
    const auto on_main = train_ranks(c, k.ranks, /*overlap_comm=*/false);
    const auto beside = train_ranks(c, k.ranks, /*overlap_comm=*/true);
    if (beside[0].size() != static_cast<size_t>(c.training.steps) ||
        on_main[0].size() != static_cast<size_t>(c.training.steps))
      continue;  // a rank failed: run_thread_ranks said which
    int64_t moved = 0;
    for (size_t r = 0; r < static_cast<size_t>(k.ranks); ++r) {
      ASSERT_EQ(beside[r].size(), on_main[r].size());
      int64_t ahead = 0;
      for (size_t i = 0; i < on_main[r].size(); ++i) {
        const StepMetrics& a = on_main[r][i];
        const StepMetrics& b = beside[r][i];
        SCOPED_TRACE(str_cat("rank ", r, ", step ", i + 1));
        EXPECT_EQ(b.loss, a.loss);
        EXPECT_EQ(b.grad_norm, a.grad_norm);
        EXPECT_EQ(b.engine.comm_bytes, a.engine.comm_bytes);
        EXPECT_EQ(b.engine.gathers, a.engine.gathers);
        EXPECT_EQ(b.engine.reductions, a.engine.reductions);
        EXPECT_EQ(a.engine.comm_gathers_ahead, 0) << "on the main thread nothing goes ahead";
        EXPECT_EQ(a.engine.comm_wait_s, 0.0);
        EXPECT_GE(b.engine.comm_wait_s, 0.0);
        if (i == 0) {
          EXPECT_EQ(b.engine.comm_gathers_ahead, 0) << "the warm-up has no trace yet";
        }
        ahead += b.engine.comm_gathers_ahead;
        moved += b.engine.moved_h2d_bytes;
        // Whatever went ahead is among the step's gathers, which are as many as without.
        EXPECT_LE(b.engine.comm_gathers_ahead, b.engine.gathers);
      }
      EXPECT_GT(ahead, 0) << "rank " << r << ": no gather went ahead after the warm-up";
    }
    EXPECT_GT(moved, 0) << "the budget was meant to make chunks move";
  }
}

}  // namespace
}  // namespace pstar::train
