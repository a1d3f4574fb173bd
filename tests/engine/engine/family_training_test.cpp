// Every family trained from its folder through the trainer: two steps (AdamW between) of
// tests/reference/decoder_reference.py's batches give the script's float64 losses to 1e-5 in both
// engines, a tight device budget changes no bit, and two ranks (threads with the communicator's
// double, ZeRO over the chunks) give the one-rank losses of the same global batch.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "engine/cpu_plan.h"
#include "engine/dist/thread_ranks.h"
#include "engine/engine/family_training.h"
#include "engine/family_folders.h"
#include "engine/step_losses.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

using pstar::testing::FamilyFolder;
using pstar::testing::losses;

constexpr double kTolerance = pstar::testing::kFamilyTolerance;

void expect_reference(const std::vector<StepMetrics>& got, const FamilyFolder& f,
                      const std::string& what) {
  ASSERT_EQ(got.size(), f.losses.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i].loss, f.losses[i], kTolerance * f.losses[i]) << what << ", step " << i + 1;
}

class FamilyTrainingTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FamilyTrainingTest, BothEnginesBudgetsAndRanksGiveTheReferenceLosses) {
  const FamilyFolder* f = pstar::testing::family_folder(GetParam());
  if (f == nullptr)
    GTEST_SKIP() << "no Python with torch to write the reference folders (Debian: apt-get "
                    "install python3-torch)";
  config::TrainConfig c = pstar::testing::family_training_config(*f);
  c.default_chunk_size = 4096;  // a few chunks, so that a budget forces moves
  c.use_cpu_embedding = config::OnOffAuto::kOff;

  c.engine.mode = config::EngineMode::kTorch;
  expect_reference(pstar::testing::run_steps(c), *f, "torch engine");

  c.engine.mode = config::EngineMode::kChunked;
  engine::ChunkedEngine* engine = nullptr;
  std::unique_ptr<Trainer> keep;
  const auto free_run = pstar::testing::run_steps(c, &engine, &keep);
  expect_reference(free_run, *f, "chunk engine");
  int64_t non_model = engine->fit().device_non_model;
  for (int64_t b : engine->trace().non_model_bytes) non_model = std::max(non_model, b);
  const int64_t chunk_bytes = engine->compute_chunk_bytes();
  const int64_t working_set = engine->largest_working_set_bytes();
  keep.reset();

  config::TrainConfig tight = c;
  tight.engine.device_memory = non_model + working_set + 2 * chunk_bytes;
  const auto budgeted = pstar::testing::run_steps(tight, &engine, &keep);
  EXPECT_EQ(losses(budgeted), losses(free_run)) << "a tight budget changed the numbers";
  int64_t moved = 0;
  for (const auto& m : budgeted) moved += m.engine.moved_h2d_bytes;
  EXPECT_GT(moved, 0) << "the budget did not bind";
  keep.reset();

  // Two ranks of half the batch each: the same global batch, ZeRO over the chunks.
  constexpr int kRanks = 2;
  const auto ranked = pstar::testing::run_split_over_ranks(c, kRanks);
  for (int r = 0; r < kRanks; ++r)
    expect_reference(ranked[static_cast<size_t>(r)], *f, "rank " + std::to_string(r) + " of 2");
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTrainingTest,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "gemma3_text",
                                           "phi3", "mixtral", "qwen3_moe"));

// nn.Embedding's padding_idx: the pad row's lookups give no gradient. The reference's tokens hold
// the pad id every fifth position, so a model that let them through would update that row and miss
// the second step's loss.
TEST(FamilyTrainingPaddingTest, ThePadRowLearnsNothingFromItsLookups) {
  for (const char* family : {"gemma3_text", "phi3"}) {
    SCOPED_TRACE(family);
    const FamilyFolder* f = pstar::testing::family_folder(family);
    if (f == nullptr)
      GTEST_SKIP() << "no Python with torch (Debian: apt-get install python3-torch)";
    config::TrainConfig c = pstar::testing::family_training_config(*f);
    c.engine.mode = config::EngineMode::kTorch;
    expect_reference(pstar::testing::run_steps(c), *f, "with padding_idx");
    // The same run with the pad id unset in the folder's config.json.
    pstar::testing::ScratchDir dir;
    const std::string copy = dir.file("folder");
    std::filesystem::copy(f->dir, copy);
    auto j = nlohmann::json::parse(pstar::testing::read_text(copy + "/config.json"));
    j["pad_token_id"] = nullptr;
    pstar::testing::write_text(copy + "/config.json", j.dump());
    c.model.init_from = copy;
    const auto unpadded = pstar::testing::run_steps(c);
    EXPECT_NEAR(unpadded[0].loss, f->losses[0], kTolerance * f->losses[0]);
    EXPECT_GT(std::abs(unpadded[1].loss - f->losses[1]), 10 * kTolerance * f->losses[1])
        << "the pad row's gradient does not show in step 2";
  }
}

}  // namespace
}  // namespace pstar::train
