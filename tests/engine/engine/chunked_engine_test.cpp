// The chunk engine against the torch engine (the reference), across budgets, precisions,
// accumulation, checkpointing and bad inputs; and its eviction against the OPT simulator.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/small_gpt_config.h"
#include "engine/step_losses.h"
#include "pstar/base/error.h"
#include "pstar/checkpoint/store.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/chunk/eviction.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/model/causal_lm.h"
#include "pstar/model/hooks.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

using engine::ChunkedEngine;
using pstar::testing::cpu_plan;

class ChunkedEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }

  // A small GPT whose chunks are small, so that a few MiB of device memory already forces moves.
  config::TrainConfig small_config(const std::string& mode = "chunked") const {
    config::TrainConfig c = pstar::testing::small_gpt_config(corpus_, mode);
    return c;
  }

  std::vector<StepMetrics> run(const config::TrainConfig& c, ChunkedEngine** engine_out = nullptr,
                               std::unique_ptr<Trainer>* keep = nullptr) {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    auto built = build_model_and_engine(cpu_plan(c));
    if (engine_out) *engine_out = dynamic_cast<ChunkedEngine*>(built.engine.get());
    auto trainer = std::make_unique<Trainer>(c, std::move(built), o);
    std::vector<StepMetrics> out;
    while (trainer->steps_done() < c.training.steps) out.push_back(trainer->step());
    if (keep) *keep = std::move(trainer);
    return out;
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
  int64_t memory_in_use_before_ = memory::CpuAllocationCounter::instance().current_bytes();
};

using pstar::testing::losses;

TEST_F(ChunkedEngineTest, Fp32MatchesTheTorchEngine) {
  auto c = small_config();
  c.gradient_clipping = 0.5;
  c.optimizer.weight_decay = 0.1;
  auto chunked = run(c);
  c.engine.mode = config::EngineMode::kTorch;
  auto reference = run(c);
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_NEAR(chunked[i].loss, reference[i].loss, 1e-5 * reference[i].loss) << "step " << i + 1;
    EXPECT_NEAR(chunked[i].grad_norm, reference[i].grad_norm, 1e-4 * reference[i].grad_norm);
  }
  EXPECT_LT(chunked.back().loss, 0.7 * chunked.front().loss);
}

// Clipped for the reason TrainerTest.Bf16TracksFp32 gives: unclipped, both engines are at the edge
// of stability at this learning rate, and a one-step spike that either may or may not take hides
// the comparison. At 1.0, the initial values of Note [counter-based init] gave such a spike at step
// 12 to the chunk engine alone on ATen's AVX2 kernels (grad norm 10.0 against 5.7); at 0.5 both
// engines take every spike together and stay within 0.1% of each other on either kernel set.
TEST_F(ChunkedEngineTest, Bf16MatchesTheTorchEngineAndConverges) {
  auto c = small_config();
  c.bf16.enabled = config::OnOffAuto::kOn;
  c.gradient_clipping = 0.5;
  auto chunked = run(c);
  c.engine.mode = config::EngineMode::kTorch;
  auto reference = run(c);
  for (size_t i = 0; i < reference.size(); ++i)
    EXPECT_NEAR(chunked[i].loss, reference[i].loss, 1e-2 * reference[i].loss) << "step " << i + 1;
  EXPECT_LT(chunked.back().loss, 0.7 * chunked.front().loss);
}

TEST_F(ChunkedEngineTest, AccumulationMatchesTheTorchEngine) {
  for (bool bf16 : {false, true}) {
    auto c = small_config();
    c.training.steps = 8;
    c.gradient_accumulation_steps = 3;
    c.bf16.enabled = config::on_off(bf16);
    auto chunked = run(c);
    c.engine.mode = config::EngineMode::kTorch;
    auto reference = run(c);
    const double tol = bf16 ? 1e-2 : 1e-5;
    for (size_t i = 0; i < reference.size(); ++i)
      EXPECT_NEAR(chunked[i].loss, reference[i].loss, tol * reference[i].loss)
          << (bf16 ? "bf16" : "fp32") << " step " << i + 1;
  }
}

TEST_F(ChunkedEngineTest, TightBudgetGivesBitIdenticalLossesUnderTheBudget) {
  for (bool bf16 : {true, false}) {
    auto c = small_config();
    c.bf16.enabled = config::on_off(bf16);
    c.training.steps = 8;
    ChunkedEngine* engine = nullptr;
    std::unique_ptr<Trainer> keep;
    auto free_run = run(c, &engine, &keep);
    // Non-model peak from the unconstrained run's plan, plus room for three chunks.
    int64_t non_model = 0;
    for (int64_t b : engine->trace().non_model_bytes) non_model = std::max(non_model, b);
    const int64_t chunk_bytes = engine->compute_chunk_bytes();
    const int64_t num_chunks = engine->num_chunks();
    keep.reset();
    c.engine.device_memory = non_model + 3 * chunk_bytes + chunk_bytes / 2;
    auto tight = run(c, &engine, &keep);
    EXPECT_EQ(losses(tight), losses(free_run)) << (bf16 ? "bf16" : "fp32");
    EXPECT_LT(engine->margin_chunks(), num_chunks);
    int64_t moved = 0;
    for (const auto& m : tight) {
      EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
      moved += m.engine.moved_h2d_bytes;
    }
    EXPECT_GT(moved, 0);
  }
}

TEST_F(ChunkedEngineTest, ActivationCheckpointingChangesNothing) {
  for (const char* mode : {"chunked", "torch"}) {
    auto c = small_config(mode);
    c.training.steps = 5;
    c.bf16.enabled = config::OnOffAuto::kOn;
    auto plain = run(c);
    c.engine.activation_checkpointing = true;
    auto recomputed = run(c);
    EXPECT_EQ(losses(recomputed), losses(plain)) << mode;
  }
}

// A user's own module, with the one documented change: run_module around the leaf forwards.
class UserLinear : public torch::nn::Module {
 public:
  UserLinear(int64_t in, int64_t out) {
    weight = register_parameter("weight", torch::randn({in, out}) * 0.05);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return model::run_module(*this, [&] { return torch::matmul(x, weight); });
  }
  torch::Tensor weight;
};

class UserEmbedding : public torch::nn::Module {
 public:
  explicit UserEmbedding(int64_t vocab, int64_t dim) {
    weight = register_parameter("weight", torch::randn({vocab, dim}) * 0.05);
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    return model::run_module(*this, [&] { return torch::embedding(weight, ids); });
  }
  torch::Tensor weight;
};

class UserModel : public model::CausalLM {
 public:
  UserModel() {
    embed = register_module("embed", std::make_shared<UserEmbedding>(256, 48));
    hidden = register_module("hidden", std::make_shared<UserLinear>(48, 48));
    head = register_module("head", std::make_shared<UserLinear>(48, 256));
  }
  torch::Tensor forward(const torch::Tensor& ids) override {
    return head->forward(torch::tanh(hidden->forward(embed->forward(ids))));
  }
  int64_t vocab_size() const override { return 256; }
  int64_t max_seq_len() const override { return 32; }
  std::shared_ptr<UserEmbedding> embed;
  std::shared_ptr<UserLinear> hidden, head;
};

TEST_F(ChunkedEngineTest, TrainsAUserModuleLikeTheTorchEngine) {
  auto c = small_config();
  c.training.steps = 15;
  c.optimizer.lr = 1e-2;
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  torch::manual_seed(5);
  Trainer chunked(c, std::make_shared<UserModel>(), o);
  c.engine.mode = config::EngineMode::kTorch;
  torch::manual_seed(5);
  Trainer reference(c, std::make_shared<UserModel>(), o);
  double first = 0, last = 0;
  for (int i = 0; i < 15; ++i) {
    auto a = chunked.step(), b = reference.step();
    EXPECT_NEAR(a.loss, b.loss, 1e-5 * b.loss) << "step " << i + 1;
    if (i == 0) first = a.loss;
    last = a.loss;
  }
  EXPECT_LT(last, 0.8 * first);
}

TEST_F(ChunkedEngineTest, ModelTooLargeForTheTiersIsRefusedBeforeTraining) {
  auto c = small_config();
  // The host holds a few chunks; the rest cannot stay on a 3 MiB device next to the activations.
  c.engine.host_memory = int64_t{1} << 20;
  c.engine.device_memory = int64_t{3} << 20;
  try {
    run(c);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model data needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("engine.host_memory 1.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("raise the host or device memory"), std::string::npos) << msg;
  }
  // With room on the device, the chunks the host cannot hold stay there and training runs.
  c.engine.device_memory = int64_t{16} << 20;
  c.training.steps = 3;
  ChunkedEngine* engine = nullptr;
  std::unique_ptr<Trainer> keep;
  auto metrics = run(c, &engine, &keep);
  EXPECT_GT(engine->fit().device_chunks, 0);
  EXPECT_GE(engine->margin_chunks(), engine->fit().device_chunks);
  c.engine.host_memory.reset();
  c.engine.device_memory = 50000;  // less than two chunks
  try {
    run(c);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("engine.device_memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("working set"), std::string::npos) << e.what();
  }
}

TEST_F(ChunkedEngineTest, DeviceTooSmallForActivationsIsRefusedAtStartUp) {
  auto c = small_config();
  c.engine.device_memory = 400000;  // two chunks fit, the predicted activations do not
  try {
    run(c);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("predicted non-model peak"), std::string::npos) << msg;
    EXPECT_NE(msg.find("micro-batch"), std::string::npos) << msg;
  }
}

// A model built outside build_model_and_engine has no activation prediction (0): the runtime
// check against the measured non-model memory catches it in the first step.
TEST_F(ChunkedEngineTest, DeviceTooSmallForActivationsFailsClearlyMidRun) {
  auto c = small_config();
  c.engine.device_memory = 400000;
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  try {
    Trainer trainer(c, ModelAndEngine{build_model(c), nullptr, {}}, o);
    trainer.step();
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device tier over budget"), std::string::npos) << msg;
    EXPECT_NE(msg.find("non-model"), std::string::npos) << msg;
  }
}

TEST_F(ChunkedEngineTest, StartUpNeverHoldsASecondCopyOfTheModel) {
  auto c = small_config();
  c.model.layers = 12;
  c.model.hidden = 128;
  c.bf16.enabled = config::OnOffAuto::kOn;
  c.default_chunk_size = 1 << 17;
  auto built = build_model_and_engine(cpu_plan(c));
  auto* engine = dynamic_cast<ChunkedEngine*>(built.engine.get());
  int64_t params = 0;
  for (const auto& p : built.model->parameters()) params += p.numel();
  const int64_t model_data =
      engine->num_chunks() * (engine->compute_chunk_bytes() + engine->optimizer_chunk_bytes());
  const int64_t before = memory_in_use_before_;
  // Beyond the chunks, start-up holds at most a unit in flight (a block: 12h² fp32 values) and
  // what was allocated before, far less than the 4 bytes per parameter of a full fp32 copy.
  const int64_t extra = engine->startup_peak_bytes() - model_data - before;
  EXPECT_LT(extra, params * 4 / 4) << "extra " << extra << " model " << params * 4;
  EXPECT_GE(engine->startup_peak_bytes(), model_data);
}

// Note [chunk sizes]: with one rank, modules larger than default_chunk_size get chunks of their
// own; the engine trains as the torch engine does, and a tight budget (moves in bytes) changes
// no loss.
TEST_F(ChunkedEngineTest, OversizedModulesGetChunksOfTheirOwn) {
  for (bool bf16 : {false, true}) {
    auto c = small_config();
    c.bf16.enabled = config::on_off(bf16);
    c.default_chunk_size = 1000;  // smaller than every Conv1D and the embedding, by far
    c.gradient_clipping = 0.5;
    c.training.steps = 8;
    ChunkedEngine* engine = nullptr;
    std::unique_ptr<Trainer> keep;
    auto free_run = run(c, &engine, &keep);
    const std::vector<int64_t> sizes = engine->chunk_sizes();
    const int64_t ordinary = engine->chunk_size();
    EXPECT_LE(ordinary, 4000);
    int64_t oversized = 0;
    for (int64_t size : sizes) oversized += size > ordinary ? 1 : 0;
    EXPECT_GE(oversized, 3 * 4) << "each block's attention and MLP weights, and the embeddings";
    // The device must hold the largest moment's chunks and one more ordinary chunk.
    const int64_t per = engine->compute_chunk_bytes() / ordinary;  // bytes per element
    int64_t non_model = 0;
    for (int64_t b : engine->trace().non_model_bytes) non_model = std::max(non_model, b);
    const int64_t largest_moment = engine->largest_working_set_bytes();
    keep.reset();
    auto tight_config = c;
    tight_config.engine.device_memory = non_model + largest_moment + 2 * ordinary * per;
    auto tight = run(tight_config, &engine, &keep);
    EXPECT_EQ(losses(tight), losses(free_run)) << (bf16 ? "bf16" : "fp32");
    int64_t moved = 0;
    for (const auto& m : tight) {
      EXPECT_LE(m.engine.device_peak_bytes, *tight_config.engine.device_memory)
          << "step " << m.step;
      moved += m.engine.moved_h2d_bytes;
    }
    EXPECT_GT(moved, 0);
    keep.reset();
    c.engine.mode = config::EngineMode::kTorch;
    auto reference = run(c);
    const double tol = bf16 ? 1e-2 : 1e-5;
    for (size_t i = 0; i < reference.size(); ++i)
      EXPECT_NEAR(free_run[i].loss, reference[i].loss, tol * reference[i].loss)
          << (bf16 ? "bf16" : "fp32") << " step " << i + 1;
  }
}

// Steady-state moved bytes per step against the furthest-next-use simulator (Note [eviction
// order], Note [mixed chunk sizes]) on the engine's own recorded trace, with chunks of one size
// and with oversized modules in chunks of their own.
TEST_F(ChunkedEngineTest, EvictionIsWithinTenPercentOfOpt) {
  for (const int64_t chunk_size : {int64_t{20000}, int64_t{1000}}) {
    auto c = small_config();
    c.bf16.enabled = config::OnOffAuto::kOn;
    c.use_cpu_embedding = config::OnOffAuto::kOff;
    c.default_chunk_size = chunk_size;
    c.training.steps = 3;
    ChunkedEngine* engine = nullptr;
    std::unique_ptr<Trainer> keep;
    run(c, &engine, &keep);
    int64_t non_model = 0;
    for (int64_t b : engine->trace().non_model_bytes) non_model = std::max(non_model, b);
    const std::vector<int64_t> sizes = engine->chunk_sizes();
    const int64_t compute_per = engine->compute_chunk_bytes() / engine->chunk_size();
    const int64_t whole_per = compute_per + engine->optimizer_chunk_bytes() / engine->chunk_size();
    const int64_t largest_moment = engine->largest_working_set_bytes();
    const int64_t ordinary_bytes = engine->compute_chunk_bytes();
    keep.reset();  // the engine goes with its trainer
    c.engine.device_memory = non_model + largest_moment + 2 * ordinary_bytes;
    c.training.steps = 8;
    auto tight = run(c, &engine, &keep);

    // The simulator plays the recorded trace with the same capacities: margin chunks are always
    // resident and left out; the optimizer moment sends every other chunk to the host.
    const auto& trace = engine->trace();
    const int64_t num = engine->num_chunks();
    const int64_t margin = engine->margin_chunks();
    ASSERT_LT(margin, num);
    chunk::AccessTrace movable;
    for (const auto& at : trace.accesses) {
      std::vector<int64_t> kept;
      for (int64_t k : at)
        if (k >= margin) kept.push_back(k - margin);  // the margin is the first chunks
      movable.accesses.push_back(kept);
    }
    movable.non_model_bytes = trace.non_model_bytes;
    int64_t pinned = 0;
    std::vector<int64_t> bytes;
    for (int64_t k = 0; k < num; ++k) {
      const int64_t size = sizes[static_cast<size_t>(k)];
      if (k < margin)
        pinned += size * whole_per;
      else
        bytes.push_back(size * compute_per);
    }
    std::vector<int64_t> capacity;
    for (int64_t t = 0; t < trace.num_moments(); ++t) {
      capacity.push_back(std::max<int64_t>(
          0, chunk::device_chunk_budget_bytes(trace, t, engine->device_budget_bytes()) - pinned));
    }
    capacity.back() = 0;
    auto opt = chunk::simulate_opt(movable, bytes, capacity, 6, 2);
    const double opt_bytes_per_step = static_cast<double>(opt.total()) / 4.0;
    double measured = 0;
    for (size_t i = 4; i < tight.size(); ++i)
      measured +=
          static_cast<double>(tight[i].engine.moved_h2d_bytes + tight[i].engine.moved_d2h_bytes);
    measured /= static_cast<double>(tight.size() - 4);
    RecordProperty("moved_bytes_per_step_" + std::to_string(chunk_size), std::to_string(measured));
    RecordProperty("opt_bytes_per_step_" + std::to_string(chunk_size),
                   std::to_string(opt_bytes_per_step));
    EXPECT_GT(measured, 0) << chunk_size;
    EXPECT_LE(measured, 1.10 * opt_bytes_per_step) << "chunk size " << chunk_size << ": measured "
                                                   << measured << " vs OPT " << opt_bytes_per_step;
  }
}

}  // namespace
}  // namespace pstar::train

namespace pstar::train {
namespace {

using engine::ChunkedEngine;
using pstar::testing::cpu_plan;

class CheckpointTest : public ChunkedEngineTest {};

TEST_F(CheckpointTest, ResumeIsBitIdentical) {
  // Beside both engines, the chunk engine's settings a GPU run takes by default and the CPU's
  // "auto" does not: host Adam on its worker, and the embedding in ordinary chunks.
  for (const char* mode : {"chunked", "torch", "chunked-overlap", "chunked-gpu-embedding"}) {
    for (bool bf16 : {true, false}) {
      const std::string variant = mode;
      auto c = small_config(variant == "torch" ? "torch" : "chunked");
      if (variant == "chunked-overlap") c.engine.overlap_adam = config::OnOffAuto::kOn;
      if (variant == "chunked-gpu-embedding") c.use_cpu_embedding = config::OnOffAuto::kOff;
      c.bf16.enabled = config::on_off(bf16);
      c.training.steps = 10;
      c.training.lr_schedule.type = "cosine";
      c.training.lr_schedule.warmup_steps = 3;
      auto full = run(c);
      c.training.save_dir = dir_.file(std::string("ckpt-") + mode + (bf16 ? "-bf16" : "-fp32"));
      c.training.save_interval = 4;
      c.training.steps = 6;  // stops after saving at step 4 and step 6
      run(c);
      c.training.steps = 10;
      TrainOptions o;
      o.device = "cpu";
      o.progress = false;
      o.resume_dir = checkpoint::checkpoint_dir(c.training.save_dir, 4);
      Trainer resumed(c, build_model_and_engine(cpu_plan(c)), o);
      ASSERT_EQ(resumed.steps_done(), 4);
      for (int64_t s = 5; s <= 10; ++s) {
        auto m = resumed.step();
        EXPECT_EQ(m.loss, full[s - 1].loss) << mode << (bf16 ? " bf16" : " fp32") << " step " << s;
        EXPECT_EQ(m.grad_norm, full[s - 1].grad_norm);
      }
      // The first run saved steps 4 and 6; the resumed one steps 8 and 10, the newest.
      EXPECT_EQ(checkpoint::resolve_resume_dir(c.training.save_dir).dir,
                checkpoint::checkpoint_dir(c.training.save_dir, 10));
      EXPECT_TRUE(std::filesystem::exists(checkpoint::checkpoint_dir(c.training.save_dir, 6) +
                                          "/ckpt-0.pt"));
    }
  }
}

TEST_F(CheckpointTest, FilesAreDictsOfNamedTensors) {
  auto c = small_config();
  c.training.steps = 2;
  c.training.save_dir = dir_.file("ck");
  c.training.save_interval = 2;
  run(c);
  auto tensors = checkpoint::read_checkpoint_file(
      checkpoint::checkpoint_dir(c.training.save_dir, 2) + "/ckpt-0.pt");
  ASSERT_TRUE(tensors.count("transformer.h.0.attn.c_attn.weight"));
  EXPECT_EQ(tensors["transformer.h.0.attn.c_attn.weight"].sizes().vec(),
            (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(tensors["transformer.h.0.attn.c_attn.weight"].scalar_type(), torch::kFloat32);
  EXPECT_TRUE(tensors.count("transformer.ln_f.bias.exp_avg_sq"));
  EXPECT_EQ(tensors["__pstar__.step"].item<int64_t>(), 2);
  EXPECT_EQ(tensors["__pstar__.adam_step"].item<int64_t>(), 2);
}

TEST_F(CheckpointTest, BadCheckpointsAreClearErrors) {
  auto c = small_config();
  c.training.steps = 2;
  c.training.save_dir = dir_.file("ck");
  c.training.save_interval = 2;
  run(c);
  const std::string dir = checkpoint::checkpoint_dir(c.training.save_dir, 2);
  const std::string file = dir + "/ckpt-0.pt";
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  o.resume_dir = dir;
  // Another model shape.
  auto wider = c;
  wider.model.hidden = 96;
  try {
    Trainer t(wider, build_model_and_engine(cpu_plan(wider)), o);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find("transformer.wte.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("another model shape"), std::string::npos) << msg;
  }
  // Truncated.
  const std::string bytes = pstar::testing::read_text(file);
  pstar::testing::write_text(file, bytes.substr(0, bytes.size() / 2));
  try {
    Trainer t(c, build_model_and_engine(cpu_plan(c)), o);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    // The manifest's size and CRC-32 catch it before the file is parsed.
    EXPECT_NE(std::string(e.what()).find("not intact"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  // Without a manifest (as pstar wrote before multi-rank training) the reader itself finds it.
  std::filesystem::remove(dir + "/manifest.json");
  try {
    Trainer t(c, build_model_and_engine(cpu_plan(c)), o);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated or corrupt"), std::string::npos) << e.what();
  }
  // Nothing to resume from.
  o.resume_dir = dir_.file("nowhere");
  EXPECT_THROW(Trainer(c, build_model_and_engine(cpu_plan(c)), o), IoError);
}

}  // namespace
}  // namespace pstar::train

namespace pstar::memory {
namespace {

TEST(CpuAllocationCounterTest, SeesTensorBytesAndKeepsThePeak) {
  auto& counter = CpuAllocationCounter::instance();
  const int64_t base = counter.current_bytes();
  counter.reset_peak();
  {
    auto t = torch::empty({1 << 20}, torch::kFloat32);  // 4 MiB
    EXPECT_GE(counter.current_bytes() - base, int64_t{4} << 20);
    auto activations = torch::relu(torch::randn({512, 512}));  // more through LibTorch ops
    EXPECT_GE(counter.current_bytes() - base, (int64_t{4} << 20) + 512 * 512 * 4);
  }
  EXPECT_LT(counter.current_bytes() - base, int64_t{1} << 20);
  // The spike between the two samples is not missed.
  EXPECT_GE(counter.reset_peak() - base, (int64_t{4} << 20) + 512 * 512 * 4);
  EXPECT_LT(counter.peak_bytes() - base, int64_t{1} << 20);
}

}  // namespace
}  // namespace pstar::memory
