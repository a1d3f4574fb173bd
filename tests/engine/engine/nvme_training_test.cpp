// The chunk engine with its NVMe tier (engine.nvme_path, Note [nvme tier]): a model three times
// the device and host budgets together trains with the losses of an unconstrained run, under the
// host budget, with its optimizer payloads read and written through the NVMe metrics; checkpoints
// read the NVMe-resident state through and resume bit-exactly; I/O faults and a removed directory
// are clear errors that leave the last checkpoint intact.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu_plan.h"
#include "engine/small_gpt_config.h"
#include "engine/step_losses.h"
#include "pstar/base/error.h"
#include "pstar/checkpoint/store.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

namespace fs = std::filesystem;
using engine::ChunkedEngine;
using pstar::testing::cpu_plan;
using pstar::testing::losses;

// Sets an environment variable for one scope (the engine reads its NVMe test seams there).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// The chunks' sizes and the non-model peak of an unconstrained run, from which the tight budgets
// are made.
struct Sizes {
  int64_t compute = 0, optimizer = 0, chunks = 0, non_model = 0;  // compute, optimizer: ordinary
  std::vector<int64_t> elements;  // each chunk's (Note [chunk sizes])
  int64_t ordinary = 0;           // an ordinary chunk's elements
  int64_t whole() const { return compute + optimizer; }
};

class NvmeTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
    fs::create_directories(nvme_dir());
  }

  std::string nvme_dir() const { return dir_.file("nvme"); }

  // A deep, narrow GPT with small chunks and little activation memory, so that its model data is
  // many times what two small budgets hold while a step takes milliseconds.
  config::TrainConfig deep_config(bool bf16) const {
    config::TrainConfig c = pstar::testing::small_gpt_config(corpus_);
    c.model.layers = 10;
    c.model.seq_len = 16;
    c.train_micro_batch_size_per_gpu = 1;
    c.training.steps = 6;
    c.use_cpu_embedding = config::OnOffAuto::kOff;
    c.engine.activation_checkpointing = true;
    c.bf16.enabled = config::on_off(bf16);
    return c;
  }

  // deep_config in bf16 for 8 steps under tight budgets with NVMe, saving every `save_interval`
  // steps; `full` receives the unconstrained run's figures.
  config::TrainConfig saving_nvme_config(int64_t save_interval, std::vector<StepMetrics>* full,
                                         Sizes* sizes) {
    auto c = deep_config(/*bf16=*/true);
    c.training.steps = 8;
    *full = run(c, sizes);
    tighten(c, *sizes);
    c.engine.nvme_path = nvme_dir();
    c.training.save_dir = dir_.file("ckpt");
    c.training.save_interval = save_interval;
    return c;
  }

  std::vector<StepMetrics> run(const config::TrainConfig& c, Sizes* sizes = nullptr,
                               const std::string& resume_dir = "", plan::Fit* fit = nullptr) {
    TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    o.resume_dir = resume_dir;
    auto built = build_model_and_engine(cpu_plan(c));
    auto* engine = dynamic_cast<ChunkedEngine*>(built.engine.get());
    if (fit != nullptr) *fit = engine->fit();
    if (sizes != nullptr) {
      sizes->compute = engine->compute_chunk_bytes();
      sizes->optimizer = engine->optimizer_chunk_bytes();
      sizes->chunks = engine->num_chunks();
      sizes->elements = engine->chunk_sizes();
      sizes->ordinary = engine->chunk_size();
    }
    Trainer trainer(c, std::move(built), o);
    std::vector<StepMetrics> out;
    while (trainer.steps_done() < c.training.steps) out.push_back(trainer.step());
    if (sizes != nullptr)
      for (int64_t b : engine->trace().non_model_bytes)
        sizes->non_model = std::max(sizes->non_model, b);
    return out;
  }

  // Budgets that hold the working set and the non-model peak on the device, and on the host the
  // compute payloads of every chunk and the NVMe staging pool, with little room to spare: the
  // optimizer payloads of nearly every chunk must go to NVMe.
  static void tighten(config::TrainConfig& c, const Sizes& s) {
    c.engine.device_memory = s.non_model + 3 * s.compute + s.compute / 2;
    c.engine.host_memory = s.chunks * s.compute + 4 * s.optimizer + s.compute;
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

struct Variant {
  bool bf16;
  bool overlap;
  const char* backend;
};

TEST_F(NvmeTrainingTest, ThreeTimesTheBudgetsTrainBitIdenticallyUnderTheHostBudget) {
  for (const Variant v : {Variant{true, false, "auto"}, Variant{true, true, "threads"},
                          Variant{false, true, "auto"}}) {
    SCOPED_TRACE(std::string(v.bf16 ? "bf16" : "fp32") + (v.overlap ? ", overlap" : "") + ", " +
                 v.backend);
    const ScopedEnv backend("PSTAR_NVME_BACKEND", v.backend);
    auto c = deep_config(v.bf16);
    c.engine.overlap_adam = config::on_off(v.overlap);
    Sizes s;
    const auto free_run = run(c, &s);
    tighten(c, s);
    c.engine.nvme_path = nvme_dir();
    const int64_t model_data = s.chunks * s.whole();
    const int64_t budgets = *c.engine.device_memory + *c.engine.host_memory;
    // bf16 keeps 2 of its 14 bytes per parameter in memory; fp32 keeps 8 of 16, so at most twice.
    if (v.bf16) {
      ASSERT_GE(model_data, 3 * budgets) << "the test model is too small for its purpose";
    } else {
      ASSERT_GT(model_data, budgets);
    }
    const auto tight = run(c);
    EXPECT_EQ(losses(tight), losses(free_run));
    int64_t read = 0, written = 0;
    for (const auto& m : tight) {
      EXPECT_LE(m.engine.host_peak_bytes, *c.engine.host_memory) << "step " << m.step;
      EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
      ASSERT_GE(m.engine.nvme.read_bytes, 0) << "no NVMe figures in step " << m.step;
      EXPECT_GE(m.engine.nvme.wait_s, 0);
      read += m.engine.nvme.read_bytes;
      written += m.engine.nvme.write_bytes;
    }
    // Every chunk the host cannot hold whole writes its optimizer payloads back every step (the
    // last step's writes may still be in flight when it ends) and reads them back once a step.
    const int64_t host_whole = (*c.engine.host_memory - 4 * s.optimizer) / s.whole();
    const int64_t on_nvme_at_least = s.chunks - host_whole - 4;
    ASSERT_GT(on_nvme_at_least, 0);
    const auto steps = static_cast<int64_t>(tight.size());
    EXPECT_GE(written, (steps - 1) * on_nvme_at_least * s.optimizer);
    EXPECT_GE(read, (steps - 1) * on_nvme_at_least * s.optimizer);
    // The run directory is gone with the engine.
    EXPECT_TRUE(fs::is_empty(nvme_dir())) << fs::directory_iterator(nvme_dir())->path();
  }
}

// Note [chunk sizes]: with modules in chunks of their own, only ordinary chunks keep their
// optimizer payloads on NVMe (its slots are ordinary chunks); the larger ones stay in memory, and
// the losses are those of the run without budgets.
TEST_F(NvmeTrainingTest, ChunksOfSeveralSizesSendOnlyOrdinaryOnesToNvme) {
  auto c = deep_config(/*bf16=*/true);
  c.default_chunk_size = 4000;  // the embedding and the MLP weights are larger
  Sizes s;
  const auto free_run = run(c, &s);
  const int64_t compute_per = s.compute / s.ordinary, optimizer_per = s.optimizer / s.ordinary;
  int64_t all_compute = 0, oversized_optimizer = 0, largest = 0, oversized = 0;
  for (int64_t n : s.elements) {
    all_compute += n * compute_per;
    largest = std::max(largest, n * compute_per);
    if (n > s.ordinary) {
      oversized_optimizer += n * optimizer_per;
      ++oversized;
    }
  }
  ASSERT_GT(oversized, 0) << "the layout has no chunk of its own";
  c.engine.device_memory = s.non_model + 3 * largest + largest / 2;
  c.engine.host_memory = all_compute + oversized_optimizer + 4 * s.optimizer + s.compute;
  c.engine.nvme_path = nvme_dir();
  plan::Fit fit;
  const auto tight = run(c, nullptr, "", &fit);
  EXPECT_EQ(losses(tight), losses(free_run));
  ASSERT_GT(fit.nvme_chunks, 0);
  for (size_t i = 0; i < fit.owned.homes.size(); ++i) {
    const plan::Fit::Home home = fit.owned.homes[i];
    if (home == plan::Fit::Home::kHostNvme || home == plan::Fit::Home::kDeviceNvme) {
      EXPECT_EQ(s.elements[i], s.ordinary) << "chunk " << i << " is on NVMe";
    }
  }
  for (const auto& m : tight) {
    EXPECT_LE(m.engine.host_peak_bytes, *c.engine.host_memory) << "step " << m.step;
    EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
  }
}

// Note [speculative adam]: chunks whose optimizer state is on NVMe are never speculated (a rollback
// would have to keep their state on the disk too), and speculation changes no loss, clipping or
// not. The NVMe fit gives the host's room to whole chunks, so the in-memory ones find no room for
// rollback slots either: the log says so and nothing is speculated.
TEST_F(NvmeTrainingTest, SpeculationLeavesNvmeChunksOutAndChangesNoLoss) {
  auto c = deep_config(/*bf16=*/true);
  Sizes s;
  run(c, &s);
  tighten(c, s);
  c.engine.nvme_path = nvme_dir();
  for (double clip : {1e-3, 1e9}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    c.gradient_clipping = clip;
    c.engine.overlap_adam = config::OnOffAuto::kOff;
    c.engine.speculative_adam = config::OnOffAuto::kOff;
    const auto in_place = run(c);
    c.engine.overlap_adam = config::OnOffAuto::kOn;
    c.engine.speculative_adam = config::OnOffAuto::kOn;
    plan::Fit fit;
    const auto speculated = run(c, nullptr, "", &fit);
    EXPECT_EQ(losses(speculated), losses(in_place));
    ASSERT_GT(fit.nvme_chunks, 0) << "nothing went to NVMe";
    for (const auto& m : speculated) {
      EXPECT_GE(m.engine.adam.speculated_chunks, 0) << "step " << m.step;
      EXPECT_LE(m.engine.adam.speculated_chunks, s.chunks - fit.nvme_chunks)
          << "an NVMe chunk was speculated, step " << m.step;
    }
  }
}

// The host holds the compute payloads of half the chunks: the others compute on the device, where
// they stay, and are updated through the host (Note [nvme tier]).
TEST_F(NvmeTrainingTest, ComputePayloadsKeptOnTheDeviceTrainBitIdentically) {
  for (bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto c = deep_config(bf16);
    Sizes s;
    const auto free_run = run(c, &s);
    const int64_t half = s.chunks / 2;
    const int64_t staging = 4 * (s.optimizer + 4095) / 4096 * 4096 + s.compute;
    c.engine.host_memory = half * s.compute + staging + s.compute / 2;
    const auto device_room =
        static_cast<double>(s.non_model + 2 * s.compute + (s.chunks - half + 1) * s.compute);
    c.engine.device_memory = static_cast<int64_t>(device_room / 0.9) + 3 * s.compute;
    c.engine.nvme_path = nvme_dir();
    plan::Fit fit;
    const auto tight = run(c, nullptr, "", &fit);
    ASSERT_GT(fit.nvme_device_chunks, 0) << "nothing computes on the device";
    EXPECT_GT(fit.nvme_host_chunks, 0);
    EXPECT_EQ(losses(tight), losses(free_run));
    for (const auto& m : tight) {
      EXPECT_LE(m.engine.host_peak_bytes, *c.engine.host_memory) << "step " << m.step;
      EXPECT_LE(m.engine.device_peak_bytes, *c.engine.device_memory) << "step " << m.step;
    }
    EXPECT_TRUE(fs::is_empty(nvme_dir()));
  }
}

TEST_F(NvmeTrainingTest, WhenEverythingFitsNothingGoesToNvme) {
  auto c = deep_config(/*bf16=*/true);
  c.training.steps = 2;
  c.engine.nvme_path = nvme_dir();
  const auto m = run(c);
  EXPECT_EQ(m.back().engine.nvme.read_bytes, -1);
  EXPECT_TRUE(fs::is_empty(nvme_dir()));
}

TEST_F(NvmeTrainingTest, CheckpointsReadTheStateThroughAndResumeBitExactly) {
  std::vector<StepMetrics> full;
  Sizes s;
  auto c = saving_nvme_config(4, &full, &s);
  c.training.steps = 4;
  run(c);
  // The checkpoint holds the state (bit-identical to the unconstrained run's) and resumes with it.
  c.training.steps = 8;
  const auto resumed = run(c, nullptr, checkpoint::checkpoint_dir(c.training.save_dir, 4));
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].loss, full[4 + i].loss) << "step " << 5 + i;
    EXPECT_EQ(resumed[i].grad_norm, full[4 + i].grad_norm) << "step " << 5 + i;
  }
}

struct Fault {
  const char* op;        // PSTAR_NVME_FAULT's OP
  const char* what;      // and its WHAT
  const char* expected;  // in the error's message
};

TEST_F(NvmeTrainingTest, IoFaultsAreClearErrorsAndTheLastCheckpointResumes) {
  std::vector<StepMetrics> full;
  Sizes s;
  auto c = saving_nvme_config(2, &full, &s);
  // Past start-up's writes and the first steps' I/O: the faults come after step 2's checkpoint.
  const int64_t later = 6 * s.chunks * ((s.optimizer + (1 << 20) - 1) >> 20);
  for (const Fault f :
       {Fault{"write", "ENOSPC", "No space left"}, Fault{"read", "EIO", "Input/output error"},
        Fault{"read", "short", "short"}}) {
    const std::string env = std::string(f.op) + ":" + std::to_string(later) + ":" + f.what;
    SCOPED_TRACE(env);
    fs::remove_all(c.training.save_dir);
    {
      const ScopedEnv fault("PSTAR_NVME_FAULT", env);
      try {
        run(c);
        FAIL() << "no error";
      } catch (const IoError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find(nvme_dir()), std::string::npos) << message;
        EXPECT_NE(message.find(f.expected), std::string::npos) << message;
      }
    }
    EXPECT_TRUE(fs::is_empty(nvme_dir()));
    // The newest checkpoint the failed run left resumes to the unconstrained run's numbers.
    const auto newest = checkpoint::resolve_resume_dir(c.training.save_dir);
    ASSERT_FALSE(newest.dir.empty());
    const auto resumed = run(c, nullptr, newest.dir);
    ASSERT_FALSE(resumed.empty());
    for (const auto& m : resumed) EXPECT_EQ(m.loss, full[m.step - 1].loss) << "step " << m.step;
  }
}

TEST_F(NvmeTrainingTest, TheDirectoryRemovedMidRunIsAClearError) {
  auto c = deep_config(/*bf16=*/true);
  Sizes s;
  run(c, &s);
  tighten(c, s);
  c.engine.nvme_path = nvme_dir();
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  Trainer trainer(c, build_model_and_engine(cpu_plan(c)), o);
  trainer.step();
  trainer.step();
  for (const auto& entry : fs::directory_iterator(nvme_dir())) fs::remove_all(entry.path());
  try {
    for (int i = 0; i < 3; ++i) trainer.step();
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(nvme_dir()), std::string::npos) << e.what();
  }
}

TEST_F(NvmeTrainingTest, AMissingNvmePathIsRefusedAtStartUpNamingIt) {
  auto c = deep_config(/*bf16=*/true);
  c.engine.nvme_path = dir_.file("no-such-dir");
  try {
    build_model_and_engine(cpu_plan(c));
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(c.engine.nvme_path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pstar::train
