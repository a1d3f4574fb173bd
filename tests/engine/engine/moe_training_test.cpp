// Mixtral and Qwen3-MoE through the trainer, against tests/reference/decoder_reference.py's
// float64 losses (its moe_reference.py part): the load-balancing loss that trains, transformers 5's
// fused experts, and routing that the data decides (experts idle for a whole warm-up step, idle
// on one rank and not the other, idle after a warm-up that used them) under a tight device budget
// and on two ranks, without a shifted trace or a hang; experts idle for a whole step left as
// torch's AdamW leaves a parameter without gradient, on every Adam path and across a resume.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/dist/thread_ranks.h"
#include "engine/engine/family_training.h"
#include "engine/family_folders.h"
#include "engine/step_losses.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

using pstar::testing::FamilyFolder;
using pstar::testing::losses;

constexpr double kTolerance = pstar::testing::kFamilyTolerance;
constexpr const char* kNoTorch =
    "no Python with torch to write the reference folders (Debian: apt-get install python3-torch)";

void expect_reference(const std::vector<StepMetrics>& got, const FamilyFolder& f,
                      const std::string& what) {
  ASSERT_EQ(got.size(), f.losses.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i].loss, f.losses[i], kTolerance * f.losses[i]) << what << ", step " << i + 1;
    ASSERT_TRUE(got[i].routing.has_value()) << what;
    // Logged whether or not it trains, computed as Hugging Face's load_balancing_loss_func.
    ASSERT_EQ(f.aux_losses.size(), f.losses.size());
    EXPECT_NEAR(got[i].routing->aux_loss, f.aux_losses[i], kTolerance * f.aux_losses[i])
        << what << ", step " << i + 1;
  }
}

config::TrainConfig moe_config(const FamilyFolder& f) {
  config::TrainConfig c = pstar::testing::family_training_config(f);
  c.default_chunk_size = 4096;
  c.use_cpu_embedding = config::OnOffAuto::kOff;
  return c;
}

// The sparse layers of the reference's tiny folders: Mixtral's 3, Qwen3-MoE's 2 (layer 1 dense).
int64_t sparse_layers(const std::string& family) { return family == "mixtral" ? 3 : 2; }

// A device budget that holds the run's non-model peak (the plan's and every traced moment's), its
// largest working set and two chunks more: chunks move every step.
int64_t tight_budget(engine::ChunkedEngine& engine) {
  int64_t non_model = engine.fit().device_non_model;
  for (int64_t b : engine.trace().non_model_bytes) non_model = std::max(non_model, b);
  return non_model + engine.largest_working_set_bytes() + 2 * engine.compute_chunk_bytes();
}

// `c` trained with `budget` bytes of device memory, which must make chunks move.
std::vector<StepMetrics> run_under(config::TrainConfig c, int64_t budget) {
  c.engine.device_memory = budget;
  auto steps = pstar::testing::run_steps(c);
  int64_t moved = 0;
  for (const auto& m : steps) moved += m.engine.moved_h2d_bytes;
  EXPECT_GT(moved, 0) << "the budget did not bind";
  return steps;
}

class MoeTrainingTest : public ::testing::TestWithParam<const char*> {};

// output_router_logits: the load-balancing loss times router_aux_loss_coef joins the loss that
// trains (the second step's loss moves), with or without activation checkpointing (then also under
// a budget that forces moves); transformers 5's fused experts load as the Hub's per-expert tensors
// do.
TEST_P(MoeTrainingTest, TheAuxLossTrainsAndFusedExpertsLoad) {
  std::vector<std::vector<double>> free_losses;  // torch and chunk engine, without checkpointing
  for (const char* variant : {"aux", "fused_experts"}) {
    SCOPED_TRACE(variant);
    const FamilyFolder* f = pstar::testing::family_folder(GetParam(), variant);
    if (f == nullptr) GTEST_SKIP() << kNoTorch;
    config::TrainConfig c = moe_config(*f);
    for (const bool checkpointing : {false, true}) {
      // Under activation checkpointing the router's probabilities reach the loss through the
      // checkpoint and its recomputation (Note [checkpointed routing]): the same bits.
      SCOPED_TRACE(checkpointing ? "activation checkpointing" : "no checkpointing");
      if (checkpointing && std::string(variant) != "aux") continue;
      c.engine.activation_checkpointing = checkpointing;
      c.engine.mode = config::EngineMode::kTorch;
      const auto torch_run = pstar::testing::run_steps(c);
      expect_reference(torch_run, *f, "torch engine");
      c.engine.mode = config::EngineMode::kChunked;
      engine::ChunkedEngine* engine = nullptr;
      std::unique_ptr<Trainer> keep;
      const auto chunk_run = pstar::testing::run_steps(c, &engine, &keep);
      expect_reference(chunk_run, *f, "chunk engine");
      if (!checkpointing) {
        free_losses = {losses(torch_run), losses(chunk_run)};
        continue;
      }
      EXPECT_EQ(losses(torch_run), free_losses[0]) << "checkpointing changed the numbers";
      EXPECT_EQ(losses(chunk_run), free_losses[1]) << "checkpointing changed the numbers";
      // And under a device budget that moves chunks between a layer's forward and its
      // recomputation.
      const int64_t budget = tight_budget(*engine);
      keep.reset();
      EXPECT_EQ(losses(run_under(c, budget)), losses(chunk_run))
          << "a tight budget changed the numbers";
    }
  }
  // The plain folder's second loss differs from the "aux" one's: the loss did train.
  const FamilyFolder* plain = pstar::testing::family_folder(GetParam());
  const FamilyFolder* aux = pstar::testing::family_folder(GetParam(), "aux");
  ASSERT_TRUE(plain != nullptr && aux != nullptr);
  EXPECT_GT(std::abs(plain->losses[1] - aux->losses[1]), 10 * kTolerance * aux->losses[1]);
}

// Routing decided by the data (moe_reference.py's ROUTED): experts idle for the whole warm-up step
// and used after it ("routed"), or used in the warm-up and idle after it ("routed_reverse"). The
// chunk engine under a device budget that forces moves matches the reference and the
// unconstrained run bit for bit (a shifted trace would stop it with an InternalError, Note [fixed
// trace]); two ranks whose micro-batches idle different experts match the reference too.
TEST_P(MoeTrainingTest, RoutingTheDataDecidesKeepsTheTraceBudgetAndRanks) {
  const std::string family = GetParam();
  const int64_t idle_pairs = 2 * sparse_layers(family);  // two of four experts a sparse layer
  for (const char* variant : {"routed", "routed_reverse"}) {
    SCOPED_TRACE(variant);
    const bool reverse = std::string(variant) == "routed_reverse";
    const FamilyFolder* f = pstar::testing::family_folder(family, variant);
    if (f == nullptr) GTEST_SKIP() << kNoTorch;
    config::TrainConfig c = moe_config(*f);
    c.engine.mode = config::EngineMode::kChunked;
    engine::ChunkedEngine* engine = nullptr;
    std::unique_ptr<Trainer> keep;
    const auto free_run = pstar::testing::run_steps(c, &engine, &keep);
    expect_reference(free_run, *f, "chunk engine");
    // The whole-step idle experts the layout makes: step 1's in "routed", step 2's in the reverse.
    EXPECT_EQ(free_run[0].routing->idle_in_step, reverse ? 0 : idle_pairs);
    EXPECT_EQ(free_run[1].routing->idle_in_step, reverse ? idle_pairs : 0);
    const int64_t budget = tight_budget(*engine);
    keep.reset();

    config::TrainConfig tight = c;
    tight.engine.device_memory = budget;
    const auto budgeted = pstar::testing::run_steps(tight);
    EXPECT_EQ(losses(budgeted), losses(free_run)) << "a tight budget changed the numbers";
    int64_t moved = 0;
    for (const auto& m : budgeted) {
      moved += m.engine.moved_h2d_bytes;
      EXPECT_LE(m.engine.device_peak_bytes, budget) << "step " << m.step;
    }
    EXPECT_GT(moved, 0) << "the budget did not bind";

    // Two ranks of two windows each: in "routed" step 2 rank 0 idles experts 2 and 3, rank 1
    // experts 0 and 1, and no expert is idle over both; the reverse's step 1 likewise.
    constexpr int kRanks = 2;
    const auto ranked = pstar::testing::run_split_over_ranks(tight, kRanks);
    const size_t split_step = reverse ? 0 : 1;
    for (int r = 0; r < kRanks; ++r) {
      const auto& got = ranked[static_cast<size_t>(r)];
      SCOPED_TRACE("rank " + std::to_string(r) + " of 2");
      ASSERT_EQ(got.size(), f->losses.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i].loss, f->losses[i], kTolerance * f->losses[i]) << "step " << i + 1;
      EXPECT_EQ(got[split_step].routing->idle_experts, static_cast<double>(idle_pairs));
      EXPECT_EQ(got[split_step].routing->idle_in_step, 0);
    }
  }
}

// bf16 without accumulation reuses each parameter's slot for its gradient. Experts 2 and 3 get no
// token in "routed"'s first step (the warm-up, updated in place): the update leaves their masters
// exactly as loaded, weight decay and all (Note [held parameters]), while the experts that ran
// move.
TEST_P(MoeTrainingTest, AnIdleExpertsSlotHoldsNoStaleGradientUnderBf16) {
  const std::string family = GetParam();
  const FamilyFolder* f = pstar::testing::family_folder(family, "routed");
  if (f == nullptr) GTEST_SKIP() << kNoTorch;
  pstar::testing::ScratchDir dir;
  config::TrainConfig c = moe_config(*f);
  c.engine.mode = config::EngineMode::kChunked;
  c.bf16.enabled = config::OnOffAuto::kOn;
  c.training.steps = 1;
  c.training.save_dir = dir.file("ck");
  c.training.save_interval = 1;
  const auto metrics = pstar::testing::run_steps(c);
  ASSERT_EQ(metrics[0].routing->idle_in_step, 2 * sparse_layers(family));
  const auto saved = checkpoint::read_checkpoint_file(
      checkpoint::checkpoint_dir(c.training.save_dir, 1) + "/ckpt-0.pt");

  config::ModelConfig m;
  m.init_from = f->dir;
  const model::ModelShape shape = model::resolve_model_shape(m);
  model::BuildOptions options;
  options.initialise = false;
  auto net = model::build_causal_lm(shape, options);
  model::load_pretrained(shape, m.init_from, *net);
  int64_t idle_checked = 0, moved = 0;
  for (const auto& p : net->named_parameters()) {
    const std::string& name = p.key();
    const size_t at = name.find(".experts.");
    if (at == std::string::npos) continue;
    const int expert = name[at + 9] - '0';
    ASSERT_TRUE(saved.count(name)) << name;
    const at::Tensor after = saved.at(name).to(torch::kFloat32);
    if (expert >= 2) {
      EXPECT_TRUE(torch::equal(after, p.value())) << name << " moved without a token";
      ++idle_checked;
    } else {
      moved += torch::equal(after, p.value()) ? 0 : 1;
    }
  }
  EXPECT_EQ(idle_checked, 2 * 3 * sparse_layers(family));
  EXPECT_EQ(moved, 2 * 3 * sparse_layers(family)) << "the experts that ran did not all move";
}

// Note [held parameters]: in "routed_gap" experts 2 and 3 get no token in the whole third step on
// any rank, between steps that use them. torch's AdamW skips them there (their gradients are
// None), so the reference's fourth loss sees them without weight decay or their moments' decay,
// and its fifth sees their fourth update's bias corrections at their own step count, 3. Both
// engines match it (a zero-gradient update moves both losses), the chunk engine under a budget
// that forces moves bit for bit and on two ranks; the count of updates missed is checkpointed,
// and a run resumed after the third step continues bit for bit.
TEST_P(MoeTrainingTest, AnExpertIdleForAWholeStepIsLeftAsTorchLeavesAParameterWithoutGradient) {
  const std::string family = GetParam();
  const FamilyFolder* f = pstar::testing::family_folder(family, "routed_gap");
  if (f == nullptr) GTEST_SKIP() << kNoTorch;
  ASSERT_EQ(f->losses.size(), 5u);
  ASSERT_GT(f->weight_decay, 0);
  pstar::testing::ScratchDir dir;
  config::TrainConfig c = moe_config(*f);
  c.training.save_interval = 3;
  for (auto mode : {config::EngineMode::kTorch, config::EngineMode::kChunked}) {
    const std::string what = mode == config::EngineMode::kTorch ? "torch engine" : "chunk engine";
    SCOPED_TRACE(what);
    c.engine.mode = mode;
    c.training.save_dir = dir.file(what);
    engine::ChunkedEngine* engine = nullptr;
    std::unique_ptr<Trainer> keep;
    const auto run = pstar::testing::run_steps(c, &engine, &keep);
    expect_reference(run, *f, what);
    EXPECT_EQ(run[2].routing->idle_in_step, 2 * sparse_layers(family));
    for (size_t i : {0u, 1u, 3u, 4u})
      EXPECT_EQ(run[i].routing->idle_in_step, 0) << "step " << i + 1;

    // After step 3 every idle expert's parameters missed one update; nothing else missed any.
    // (In a scope of its own: the emulated device counts every LibTorch CPU tensor as non-model.)
    {
      const auto saved = checkpoint::read_checkpoint_file(
          checkpoint::checkpoint_dir(c.training.save_dir, 3) + "/ckpt-0.pt");
      int64_t behind = 0;
      for (const auto& [name, value] : saved) {
        if (name.rfind(checkpoint::kAdamMissedPrefix, 0) != 0) continue;
        const std::string param = name.substr(std::string(checkpoint::kAdamMissedPrefix).size());
        const size_t at = param.find(".experts.");
        EXPECT_TRUE(at != std::string::npos && param[at + 9] >= '2') << param;
        EXPECT_EQ(value.item<int64_t>(), 1) << param;
        ++behind;
      }
      EXPECT_EQ(behind, 2 * 3 * sparse_layers(family));
    }

    {  // Resumed after step 3: the same bits.
      TrainOptions o = pstar::testing::quiet_cpu();
      o.resume_dir = checkpoint::checkpoint_dir(c.training.save_dir, 3);
      Trainer resumed(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
      for (size_t i = 3; i < 5; ++i)
        EXPECT_EQ(resumed.step().loss, run[i].loss) << "resumed, step " << i + 1;
    }
    if (mode == config::EngineMode::kTorch) continue;

    config::TrainConfig tight = c;
    tight.training.save_dir.clear();
    tight.engine.device_memory = tight_budget(*engine);
    keep.reset();
    EXPECT_EQ(losses(run_under(tight, *tight.engine.device_memory)), losses(run))
        << "a tight budget changed the numbers";
    config::TrainConfig two = tight;
    two.training.save_dir = dir.file("two ranks");
    const auto ranked = pstar::testing::run_split_over_ranks(two, 2);
    for (size_t r = 0; r < ranked.size(); ++r)
      for (size_t i = 0; i < f->losses.size(); ++i)
        EXPECT_NEAR(ranked[r][i].loss, f->losses[i], kTolerance * f->losses[i])
            << "rank " << r << " of 2, step " << i + 1;
    // Their checkpoint after step 3 resumed on one rank: resharded, the counts of updates missed
    // with it (without them, the fifth update would run experts 2 and 3 at the step's count).
    TrainOptions o = pstar::testing::quiet_cpu();
    o.resume_dir = checkpoint::checkpoint_dir(two.training.save_dir, 3);
    Trainer resumed(tight, build_model_and_engine(pstar::testing::cpu_plan(tight)), o);
    for (size_t i = 3; i < 5; ++i)
      EXPECT_NEAR(resumed.step().loss, f->losses[i], kTolerance * f->losses[i])
          << "two ranks resumed on one, step " << i + 1;
  }
}

// Note [held parameters] on every Adam path, in bf16 (param/grad reuse: a held expert's slot holds
// its zero gradient, so its parameters are rewritten from its masters): the held third step and
// the lagging fourth come after the plan, under a budget that keeps chunks on the host, updated in
// place, early on the worker, speculated into rollback slots, and on optimizer payloads read from
// NVMe; every path gives the same bits,
// and the torch engine (which drops the held experts' gradients) the same losses within bf16's
// rounding.
TEST_P(MoeTrainingTest, HeldExpertsGiveTheSameBitsOnEveryAdamPath) {
  const FamilyFolder* f = pstar::testing::family_folder(GetParam(), "routed_gap");
  if (f == nullptr) GTEST_SKIP() << kNoTorch;
  config::TrainConfig c = moe_config(*f);
  c.bf16.enabled = config::OnOffAuto::kOn;
  c.engine.mode = config::EngineMode::kTorch;
  const auto torch_run = pstar::testing::run_steps(c);
  c.engine.mode = config::EngineMode::kChunked;
  engine::ChunkedEngine* engine = nullptr;
  std::unique_ptr<Trainer> keep;
  const auto free_run = pstar::testing::run_steps(c, &engine, &keep);
  for (size_t i = 0; i < free_run.size(); ++i)
    EXPECT_NEAR(free_run[i].loss, torch_run[i].loss, 2e-3 * torch_run[i].loss) << "step " << i + 1;
  c.engine.device_memory = tight_budget(*engine);
  // A host budget that holds every chunk's compute payloads and the NVMe staging pool with little
  // to spare: most chunks' optimizer payloads go to NVMe (as NvmeTrainingTest's).
  const int64_t host_for_nvme = engine->num_chunks() * engine->compute_chunk_bytes() +
                                4 * engine->optimizer_chunk_bytes() + engine->compute_chunk_bytes();
  keep.reset();

  c.engine.overlap_adam = config::OnOffAuto::kOff;
  const auto in_place = pstar::testing::run_steps(c);
  c.engine.overlap_adam = config::OnOffAuto::kOn;
  const auto early = pstar::testing::run_steps(c);
  c.gradient_clipping = 1e9;  // never clips: the speculated update stands
  c.engine.speculative_adam = config::OnOffAuto::kOn;
  const auto speculated = pstar::testing::run_steps(c);
  EXPECT_EQ(losses(in_place), losses(free_run));
  EXPECT_EQ(losses(early), losses(free_run));
  EXPECT_EQ(losses(speculated), losses(free_run));
  int64_t early_chunks = 0, speculated_chunks = 0;
  for (size_t i = 2; i < 4; ++i) {
    early_chunks += early[i].engine.adam.early_chunks;
    speculated_chunks += speculated[i].engine.adam.speculated_chunks;
  }
  EXPECT_GT(early_chunks, 0) << "no chunk was updated early in steps 3 and 4";
  EXPECT_GT(speculated_chunks, 0) << "no chunk was speculated in steps 3 and 4";

  // The NVMe tier: host Adam on optimizer payloads read from NVMe, held runs included.
  pstar::testing::ScratchDir dir;
  c.gradient_clipping = 0;
  c.engine.speculative_adam = config::OnOffAuto::kOff;
  c.engine.nvme_path = dir.path().string();
  c.engine.host_memory = host_for_nvme;
  const auto nvme = pstar::testing::run_steps(c);
  EXPECT_EQ(losses(nvme), losses(free_run));
  int64_t read = 0;
  for (size_t i = 2; i < 4; ++i) read += nvme[i].engine.nvme.read_bytes;
  EXPECT_GT(read, 0) << "no optimizer payloads were read from NVMe in steps 3 and 4";
}

INSTANTIATE_TEST_SUITE_P(Families, MoeTrainingTest, ::testing::Values("mixtral", "qwen3_moe"));

}  // namespace
}  // namespace pstar::train
