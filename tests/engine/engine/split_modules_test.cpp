// Note [split modules]: a module larger than the ordinary chunk, on several ranks, is split over a
// communication group of its own, each rank owning one part. Ranks as threads of this process
// (engine/dist/thread_ranks.h) with the chunk engine and the trainer as `pstar train --nproc N`
// runs them: what each rank owns (its piece of the split module, at the offsets and with the bits
// of a one-rank model), the losses against one rank, and that placement, staging, precision and
// accumulation change no number.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/dist/thread_ranks.h"
#include "engine/engine/owned_parameters.h"
#include "engine/small_gpt_config.h"
#include "engine/tier/checking_tier.h"
#include "pstar/base/strings.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

constexpr int64_t kGlobalBatch = 4;

// What one rank saw.
struct RankRun {
  std::vector<std::string> owned;        // the parameters (and pieces) this rank keeps
  std::map<std::string, int64_t> numel;  // their elements
  std::vector<int64_t> chunk_sizes;
  std::vector<StepMetrics> steps;
};

class SplitModulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }

  // The small GPT with a vocabulary of 2048: its tied embedding (131072 elements) is larger than
  // four times the 20000-element chunk, so that no searched ordinary size holds it.
  config::TrainConfig gpt() const {
    config::TrainConfig c = pstar::testing::small_gpt_config(corpus_, "chunked");
    c.model.vocab_size = 2048;
    c.model.layers = 2;
    c.training.steps = 4;
    c.train_micro_batch_size_per_gpu = kGlobalBatch;
    c.train_batch_size = kGlobalBatch;
    return c;
  }

  // llama-tiny (untied head) with a vocabulary of 4096: the embedding and the LM head (262144
  // elements each) are both split.
  config::TrainConfig llama() const {
    config::TrainConfig c = gpt();
    c.model = config::ModelConfig{};
    c.model.preset = "llama-tiny";
    c.model.vocab_size = 4096;
    c.model.seq_len = 32;
    c.gradient_clipping = 1.0;
    return c;
  }

  static std::vector<StepMetrics> one_rank(const config::TrainConfig& c) {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    Trainer trainer(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
    std::vector<StepMetrics> steps;
    while (trainer.steps_done() < c.training.steps) steps.push_back(trainer.step());
    return steps;
  }

  // `ranks` thread ranks on `c` (its micro-batch divided among them), each checking what it owns
  // against `reference`; `tier` makes each rank's device tier (null: the emulated one).
  static std::vector<RankRun> ranks_run(
      config::TrainConfig c, int ranks, const std::map<std::string, at::Tensor>& reference,
      const std::function<std::unique_ptr<tier::DeviceTier>()>& tier = nullptr,
      bool device_comm = false,
      const std::function<void(const std::vector<void*>&, int64_t)>& gather_check = nullptr) {
    c.train_micro_batch_size_per_gpu = kGlobalBatch / ranks / c.gradient_accumulation_steps;
    std::vector<RankRun> runs(static_cast<size_t>(ranks));
    pstar::testing::run_thread_ranks(ranks, [&](dist::Communicator& comm) {
      // Note [device collectives]: the double then plays NCCL's side.
      auto& thread_comm = dynamic_cast<pstar::testing::ThreadCommunicator&>(comm);
      thread_comm.set_on_device(device_comm);
      thread_comm.set_gather_check(gather_check);
      RankRun& run = runs[static_cast<size_t>(comm.rank())];
      ModelAndEngine built =
          tier ? tier::testing::build_small_gpt(c, tier(), &comm)
               : build_model_and_engine(pstar::testing::cpu_plan(c, &comm), &comm);
      auto* engine = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
      if (engine == nullptr) return false;
      run.chunk_sizes = engine->chunk_sizes();
      const std::string error =
          pstar::testing::check_owned_parameters(*engine, reference, run.owned, &run.numel);
      if (!error.empty())
        std::fprintf(stderr, "rank %lld: %s\n", static_cast<long long>(comm.rank()), error.c_str());
      TrainOptions o;
      o.device = "cpu";
      o.progress = false;
      o.comm = &comm;
      Trainer trainer(c, std::move(built), o);
      while (trainer.steps_done() < c.training.steps) run.steps.push_back(trainer.step());
      return error.empty();
    });
    return runs;
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

// Every element of every parameter is kept by exactly one rank: whole, or as pieces
// (checkpoint::piece_name) that together cover it once.
void expect_each_element_owned_once(const std::vector<RankRun>& runs,
                                    const std::map<std::string, at::Tensor>& reference) {
  std::map<std::string, std::vector<int>> count;
  for (const auto& [name, t] : reference) count[name].assign(static_cast<size_t>(t.numel()), 0);
  for (const RankRun& run : runs) {
    for (const std::string& stored : run.owned) {
      const auto piece = checkpoint::parse_piece_name(stored);
      const std::string name = piece ? piece->first : stored;
      ASSERT_TRUE(count.count(name)) << stored;
      const int64_t begin = piece ? piece->second : 0;
      const int64_t numel = run.numel.at(stored);
      for (int64_t i = begin; i < begin + numel; ++i) ++count[name][static_cast<size_t>(i)];
    }
  }
  for (const auto& [name, counts] : count) {
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    EXPECT_EQ(*lo, 1) << name << ": an element no rank keeps";
    EXPECT_EQ(*hi, 1) << name << ": an element two ranks keep";
  }
}

void expect_losses_near(const std::vector<RankRun>& runs, const std::vector<StepMetrics>& one,
                        double bound) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].steps.size(), one.size()) << "rank " << r;
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_NEAR(runs[r].steps[i].loss, one[i].loss, bound * std::abs(one[i].loss))
          << "rank " << r << ", step " << i + 1;
  }
}

// `norm_bits`: the gradient norms too; another layout sums the chunks' squares in another grouping,
// so that only their last bits may differ (they are reported, and nothing here clips).
void expect_same_bits(const std::vector<RankRun>& a, const std::vector<RankRun>& b,
                      bool norm_bits = true) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].steps.size(), b[r].steps.size()) << "rank " << r;
    for (size_t i = 0; i < a[r].steps.size(); ++i) {
      EXPECT_EQ(a[r].steps[i].loss, b[r].steps[i].loss) << "rank " << r << ", step " << i + 1;
      if (norm_bits) {
        EXPECT_EQ(a[r].steps[i].grad_norm, b[r].steps[i].grad_norm) << "rank " << r;
      } else {
        EXPECT_NEAR(a[r].steps[i].grad_norm, b[r].steps[i].grad_norm,
                    1e-12 * b[r].steps[i].grad_norm)
            << "rank " << r;
      }
    }
  }
}

TEST_F(SplitModulesTest, TheEmbeddingIsSplitOverTwoAndFourRanksAndTracksOneRank) {
  const config::TrainConfig c = gpt();
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
  const std::vector<StepMetrics> one = one_rank(c);
  const int64_t whole = one.back().engine.model_data_bytes;
  for (const int ranks : {2, 4}) {
    SCOPED_TRACE(str_cat(ranks, " ranks"));
    const std::vector<RankRun> runs = ranks_run(c, ranks, reference);
    ASSERT_FALSE(::testing::Test::HasFailure());
    // The embedding's group comes first: one part per rank, of ceil(131072 / N) on the 20000
    // grid (80000 for 2 ranks, 40000 for 4), the ordinary chunks after it.
    const int64_t part = (131072 / ranks + 19999) / 20000 * 20000;
    for (const RankRun& run : runs) {
      ASSERT_GE(run.chunk_sizes.size(), static_cast<size_t>(ranks));
      for (int p = 0; p < ranks; ++p) EXPECT_EQ(run.chunk_sizes[static_cast<size_t>(p)], part);
      for (size_t k = static_cast<size_t>(ranks); k < run.chunk_sizes.size(); ++k)
        EXPECT_LE(run.chunk_sizes[k], 80000) << "chunk " << k;
    }
    // Each rank keeps its own piece of the embedding, starting at its part.
    for (int r = 0; r < ranks; ++r) {
      const std::vector<std::string>& owned = runs[static_cast<size_t>(r)].owned;
      EXPECT_NE(std::find(owned.begin(), owned.end(),
                          checkpoint::piece_name("transformer.wte.weight", r * part)),
                owned.end())
          << "rank " << r;
    }
    expect_each_element_owned_once(runs, reference);
    expect_losses_near(runs, one, 2e-6);
    // Each rank holds its share, within one ordinary chunk of the others'.
    for (const RankRun& run : runs) {
      for (const StepMetrics& m : run.steps) {
        EXPECT_NEAR(static_cast<double>(m.engine.model_data_bytes),
                    static_cast<double>(whole) / ranks, 80000.0 * 16)
            << "step " << m.step;
        EXPECT_GT(m.engine.gathers, 0);
      }
    }
  }
}

// A device that holds little more than the embedding's span moves chunks every step, and gives the
// bits of one that holds everything. (The device's capacity, not engine.device_memory, makes it
// tight: thread ranks share one process's count of non-model memory, so a budget would depend on
// how their moments interleave; DistTrainTest.SplitModulesResumeOnTheSameAndOnMoreRanks holds
// separate processes to a tight budget.)
TEST_F(SplitModulesTest, ATightDeviceGivesTheBitsOfARoomyOne) {
  const config::TrainConfig c = gpt();
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
  std::vector<std::vector<RankRun>> runs;
  for (const int64_t capacity : {std::numeric_limits<int64_t>::max(), int64_t{600} << 10}) {
    auto ledger = std::make_shared<tier::testing::Ledger>();
    runs.push_back(ranks_run(c, 2, reference, [&] {
      return std::make_unique<tier::testing::CheckingTier>(ledger, capacity);
    }));
    ASSERT_FALSE(::testing::Test::HasFailure());
    EXPECT_TRUE(ledger->violations.empty()) << ledger->violations.front();
  }
  expect_same_bits(runs[1], runs[0]);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(runs[0][r].steps.back().engine.moved_h2d_bytes, 0) << "rank " << r;
    EXPECT_GT(runs[1][r].steps.back().engine.moved_h2d_bytes, 0) << "rank " << r;
  }
}

// With two ranks a gradient element is the sum of the same two values whatever the layout, and
// nothing clips: splitting changes no bit of the losses against a chunk size that holds the
// embedding whole.
TEST_F(SplitModulesTest, Bf16AndAccumulationGiveTheBitsOfTheWholeLayout) {
  for (const int64_t accumulation : {int64_t{1}, int64_t{2}}) {
    SCOPED_TRACE(str_cat("gradient accumulation ", accumulation));
    config::TrainConfig c = gpt();
    c.bf16.enabled = config::on_off(true);
    c.gradient_accumulation_steps = accumulation;
    const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
    const std::vector<RankRun> split = ranks_run(c, 2, reference);
    c.default_chunk_size = 140000;  // holds the embedding: nothing is split
    const std::vector<RankRun> whole = ranks_run(c, 2, reference);
    ASSERT_FALSE(::testing::Test::HasFailure());
    EXPECT_EQ(split[0].chunk_sizes.front(), 80000);
    EXPECT_EQ(whole[0].chunk_sizes.front(), 140000);
    expect_same_bits(split, whole, /*norm_bits=*/false);
  }
}

// Note [staged collectives]: where the host cannot address the device side, a split module's
// parts travel through blocks of the communicator's side like any group's, and give the same bits:
// with Gloo's side (the host) its device-side parts, with NCCL's (the device, Note [device
// collectives]) its host-only ones (the CPU embedding's), also on a device so small that chunks
// move every step while the flat blocks and the reduction's buffer (Note [flat gathers]) take
// their share of it.
TEST_F(SplitModulesTest, StagedSplitGroupsGiveTheSameBits) {
  config::TrainConfig c = gpt();
  c.bf16.enabled = config::on_off(true);
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
  struct Mode {
    bool staged, device_comm;
    int64_t capacity;
  };
  constexpr int64_t kRoomy = std::numeric_limits<int64_t>::max();
  const Mode modes[] = {{false, false, kRoomy},
                        {true, false, kRoomy},
                        {true, true, kRoomy},
                        {true, true, int64_t{1400} << 10}};
  std::vector<std::vector<RankRun>> runs;
  for (const Mode& mode : modes) {
    SCOPED_TRACE(str_cat(mode.staged ? "staged" : "not staged",
                         mode.device_comm ? ", device communicator" : "",
                         mode.capacity == kRoomy ? "" : ", tight device"));
    auto ledger = std::make_shared<tier::testing::Ledger>();
    runs.push_back(ranks_run(
        c, 2, reference,
        [&] {
          auto checking = std::make_unique<tier::testing::CheckingTier>(ledger, mode.capacity);
          checking->set_host_addresses_device(!mode.staged);
          return checking;
        },
        mode.device_comm,
        // Every part a collective moves lies on the communicator's side, where the sides differ,
        // and nothing touches it between the collective's mark and its end (Note [communication
        // stream]).
        [&](const std::vector<void*>& parts, int64_t bytes) {
          for (const void* part : parts) ledger->in_flight_locked(part, bytes);
          if (!mode.staged) return;
          for (const void* part : parts)
            ledger->expect_inside_locked(part, bytes,
                                         mode.device_comm ? tier::Side::kDevice : tier::Side::kHost,
                                         "a gathered part");
        }));
    ASSERT_FALSE(::testing::Test::HasFailure());
    EXPECT_TRUE(ledger->violations.empty()) << ledger->violations.front();
    EXPECT_GT(ledger->comm_scopes, 0);
    EXPECT_EQ(ledger->comm_scopes, ledger->marks);
    EXPECT_GE(ledger->declared_uses, ledger->comm_scopes);
    for (const StepMetrics& m : runs.back()[0].steps) {
      if (mode.staged) {
        EXPECT_GT(m.engine.comm_staged_bytes, 0) << "step " << m.step;
      } else {
        EXPECT_EQ(m.engine.comm_staged_bytes, 0) << "step " << m.step;
      }
      if (mode.capacity != kRoomy) {
        EXPECT_GT(m.engine.moved_h2d_bytes, 0) << "step " << m.step;
      }
    }
  }
  for (size_t i = 1; i < runs.size(); ++i) expect_same_bits(runs[i], runs[0]);
}

// Note [device collectives]: a split module's parts reach the communicator side by side, this
// rank's read from its own slot of the span, so that NCCL gathers them in place as one buffer.
TEST_F(SplitModulesTest, ASplitGroupsPartsReachTheCommunicatorSideBySide) {
  const config::TrainConfig c = gpt();
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
  std::atomic<int64_t> side_by_side{0};
  ranks_run(c, 2, reference, nullptr, /*device_comm=*/false,
            [&](const std::vector<void*>& parts, int64_t bytes) {
              bool together = true;
              for (size_t r = 0; r < parts.size(); ++r)
                together = together && parts[r] == static_cast<char*>(parts[0]) +
                                                       static_cast<int64_t>(r) * bytes;
              if (together) ++side_by_side;
            });
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_GT(side_by_side.load(), 0) << "no gather of the embedding's group had its parts together";
}

// Note [split modules]: with 128Ki-element chunks (a 64Ki grid below them) the last group is split
// over the ranks rather than completed with empty chunks: 3 layers on 2 ranks put the last 3
// modules there (their parts of 64Ki after 3 ordinary chunks), 2 layers on 4 ranks the whole model
// (every module, the embedding too, in one group of 4 parts). The ranks track one rank, each
// keeping its pieces.
TEST_F(SplitModulesTest, TheLastGroupSplitOverTheRanksTracksOneRank) {
  struct Case {
    int64_t layers;
    int ranks;
    size_t ordinary;  // chunks before the last group's parts
  };
  for (const Case& k : {Case{3, 2, 2}, Case{2, 4, 0}}) {
    SCOPED_TRACE(str_cat(k.layers, " layers on ", k.ranks, " ranks"));
    config::TrainConfig c = gpt();
    c.model.layers = k.layers;
    c.default_chunk_size = 131072;
    // The embedding may lie in the last group: not pinned to the host (Note [split modules]).
    c.use_cpu_embedding = config::OnOffAuto::kOff;
    const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
    const std::vector<StepMetrics> one = one_rank(c);
    const std::vector<RankRun> runs = ranks_run(c, k.ranks, reference);
    ASSERT_FALSE(::testing::Test::HasFailure());
    const std::vector<int64_t>& sizes = runs[0].chunk_sizes;
    ASSERT_EQ(sizes.size(), k.ordinary + static_cast<size_t>(k.ranks));
    for (size_t i = 0; i < sizes.size(); ++i)
      EXPECT_EQ(sizes[i], i < k.ordinary ? 131072 : 65536) << "chunk " << i;
    expect_each_element_owned_once(runs, reference);
    expect_losses_near(runs, one, 2e-6);
  }
}

// use_cpu_embedding: the embedding's parts are host-only chunks, and its span is gathered into
// host memory, where the embedding computes.
TEST_F(SplitModulesTest, AHostPinnedEmbeddingIsSplitToo) {
  config::TrainConfig c = gpt();
  c.use_cpu_embedding = config::OnOffAuto::kOn;
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
  const std::vector<StepMetrics> one = one_rank(c);
  const std::vector<RankRun> runs = ranks_run(c, 2, reference);
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(runs[0].chunk_sizes[0], 80000);
  EXPECT_EQ(runs[0].chunk_sizes[1], 80000);
  expect_each_element_owned_once(runs, reference);
  expect_losses_near(runs, one, 2e-6);
}

TEST_F(SplitModulesTest, ALlamaSplitsItsEmbeddingAndItsHeadAndTracksOneRank) {
  const config::TrainConfig c = llama();
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);
  const std::vector<StepMetrics> one = one_rank(c);
  const std::vector<RankRun> runs = ranks_run(c, 2, reference);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // Two split groups first: the embedding's and the head's, parts of 262144 / 2 on the grid.
  ASSERT_GE(runs[0].chunk_sizes.size(), 4u);
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(runs[0].chunk_sizes[k], 140000) << "chunk " << k;
  expect_each_element_owned_once(runs, reference);
  expect_losses_near(runs, one, 2e-6);
}

}  // namespace
}  // namespace pstar::train
