// A run's checkpoints through RunCheckpoints alone (no trainer, one rank): what save writes is what
// resume gives back, a damaged checkpoint names the newest intact one, keep_last prunes.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/checkpoint/run_checkpoint.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "test_util.h"

namespace pstar::checkpoint {
namespace {

namespace fs = std::filesystem;

class RunCheckpointsTest : public ::testing::Test {
 protected:
  RunCheckpointsTest() {
    config_.training.save_dir = scratch_.file("ck");
    config_.training.save_interval = 1;
    config_.training.steps = 10;
    config_.training.keep_last = 0;
  }

  // The state of step `step`, with a generator state of its own.
  static RunState state_at(int64_t step) {
    RunState s;
    s.step = step;
    s.tokens = 1000 * step;
    s.skipped_steps = step / 3;
    s.loss_scaler = {65536.0 / static_cast<double>(step), static_cast<double>(step), 0.5};
    at::Generator g = at::detail::createCPUGenerator(static_cast<uint64_t>(step));
    s.rng = g.get_state();
    return s;
  }

  // An engine's part: one parameter and its Adam state, distinct per step.
  static EngineSaver engine_at(int64_t step) {
    return [step](TensorList& out) {
      out.emplace_back("w", torch::full({3, 4}, static_cast<float>(step)));
      out.emplace_back(exp_avg_of("w"), torch::full({3, 4}, 0.25f * static_cast<float>(step)));
    };
  }

  pstar::testing::ScratchDir scratch_;
  config::TrainConfig config_;
};

TEST_F(RunCheckpointsTest, ResumeGivesBackWhatSaveWrote) {
  RunCheckpoints writer(config_, nullptr);
  writer.set_run_id("run-a");
  writer.save(state_at(4), engine_at(4));
  EXPECT_EQ(writer.last_saved_step(), 4);
  const std::string dir = checkpoint_dir(config_.training.save_dir, 4);
  EXPECT_EQ(checkpoint_problem(dir), "");
  EXPECT_EQ(read_manifest(dir).run_id, "run-a");
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "config.json"));

  RunCheckpoints reader(config_, nullptr);
  reader.set_run_id("run-b");
  EXPECT_EQ(reader.last_saved_step(), -1);
  EXPECT_EQ(reader.last_checkpoint_hint(), "");
  TensorMap loaded;
  std::string loaded_file;
  const RunState got =
      reader.resume(config_.training.save_dir, [&](const TensorMap& in, const std::string& file) {
        loaded = in;
        loaded_file = file;
      });
  const RunState want = state_at(4);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.skipped_steps, want.skipped_steps);
  EXPECT_EQ(got.loss_scaler, want.loss_scaler);
  EXPECT_TRUE(got.rng.equal(want.rng));
  // The engine saw its own tensors, named from this rank's file.
  EXPECT_EQ(loaded_file, checkpoint_file(dir, 0));
  ASSERT_EQ(loaded.count("w"), 1u);
  EXPECT_TRUE(loaded.at("w").equal(torch::full({3, 4}, 4.0f)));
  EXPECT_TRUE(loaded.at("w.exp_avg").equal(torch::full({3, 4}, 1.0f)));
  // The resumed run continues the old one's id and counts the checkpoint as its last.
  EXPECT_EQ(reader.run_id(), "run-a");
  EXPECT_EQ(reader.last_saved_step(), 4);
  EXPECT_NE(reader.last_checkpoint_hint().find(dir), std::string::npos);
  EXPECT_NE(reader.intact_hint().find(dir), std::string::npos);
}

TEST_F(RunCheckpointsTest, ADamagedCheckpointNamesTheNewestIntactOne) {
  RunCheckpoints writer(config_, nullptr);
  writer.set_run_id("run");
  for (int64_t step : {2, 4, 6}) writer.save(state_at(step), engine_at(step));
  // Flip a byte inside step 6's file (latest) and truncate step 4's.
  const std::string six = checkpoint_file(checkpoint_dir(config_.training.save_dir, 6), 0);
  {
    std::fstream f(six, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(six) / 2));
    f.put('\x5a');
  }
  const std::string four = checkpoint_file(checkpoint_dir(config_.training.save_dir, 4), 0);
  fs::resize_file(four, fs::file_size(four) - 7);

  RunCheckpoints reader(config_, nullptr);
  bool loaded = false;
  const auto loader = [&](const TensorMap&, const std::string&) { loaded = true; };
  try {
    reader.resume(config_.training.save_dir, loader);
    FAIL() << "a damaged checkpoint was resumed";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is not intact"), std::string::npos) << what;
    EXPECT_NE(what.find("CRC-32"), std::string::npos) << what;
    EXPECT_NE(what.find("continue with --resume " + checkpoint_dir(config_.training.save_dir, 2)),
              std::string::npos)
        << what;
  }
  EXPECT_FALSE(loaded);
  EXPECT_EQ(reader.last_saved_step(), -1);
  // The one it names resumes.
  EXPECT_EQ(reader.resume(checkpoint_dir(config_.training.save_dir, 2), loader).step, 2);
  EXPECT_TRUE(loaded);
}

TEST_F(RunCheckpointsTest, ACheckpointPastTrainingStepsIsAConfigError) {
  RunCheckpoints writer(config_, nullptr);
  writer.save(state_at(8), engine_at(8));
  config_.training.steps = 5;
  RunCheckpoints reader(config_, nullptr);
  try {
    reader.resume(config_.training.save_dir, [](const TensorMap&, const std::string&) {});
    FAIL() << "resumed past training.steps";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("past training.steps 5"), std::string::npos) << e.what();
  }
}

TEST_F(RunCheckpointsTest, AnotherFormatVersionIsRefusedBeforeTheEngineLoads) {
  RunCheckpoints writer(config_, nullptr);
  writer.save(state_at(3), [](TensorList& out) {
    // What a later pstar might write. The file's dict keeps the first of equal keys, so this
    // version, ahead of the one save appends, is the one read back.
    out.emplace_back(kFormatVersionKey, torch::tensor(kFormatVersion + 1));
  });
  RunCheckpoints reader(config_, nullptr);
  bool loaded = false;
  try {
    reader.resume(config_.training.save_dir,
                  [&](const TensorMap&, const std::string&) { loaded = true; });
    FAIL() << "resumed a checkpoint of another format version";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint format version 2 is not supported"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(loaded);
}

TEST_F(RunCheckpointsTest, KeepLastKeepsTheNewestCheckpoints) {
  config_.training.keep_last = 2;
  RunCheckpoints writer(config_, nullptr);
  for (int64_t step = 1; step <= 5; ++step) writer.save(state_at(step), engine_at(step));
  std::vector<int64_t> left;
  for (const auto& e : list_checkpoints(config_.training.save_dir)) left.push_back(e.step);
  EXPECT_EQ(left, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(resolve_resume_dir(config_.training.save_dir).dir,
            checkpoint_dir(config_.training.save_dir, 5));
}

}  // namespace
}  // namespace pstar::checkpoint
