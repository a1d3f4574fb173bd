// The run's TensorBoard event file (train/tensorboard.h): the metric table's tags and the docs'
// list of them, and what a Trainer writes and when it is flushed (Note [tensorboard flushes]).
#include "pstar/train/tensorboard.h"

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/cpu_plan.h"
#include "event_file_reader.h"
#include "pstar/engine/param_engine.h"
#include "pstar/formats/config.h"
#include "pstar/train/metrics.h"
#include "pstar/train/trainer.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::train {
namespace {

namespace fs = std::filesystem;
using pstar::testing::read_events;
using pstar::testing::ReadEvent;

// Every figure a step can have, each measured.
StepMetrics every_figure() {
  StepMetrics m;
  m.step = 3;
  m.eval_loss = 1.5;
  m.tflops = 1.0;
  m.routing = RoutingMetrics{0.5, 1.0, 1.5, 2};  // a mixture of experts
  engine::EngineMetrics& e = m.engine;
  for (int64_t* v : {&e.device_peak_bytes,
                     &e.device_reserved_peak_bytes,
                     &e.steady.device_syncs,
                     &e.steady.pool_allocated_bytes,
                     &e.steady.pool_trims,
                     &e.host_peak_bytes,
                     &e.moved_h2d_bytes,
                     &e.moved_d2h_bytes,
                     &e.prefetched_h2d_bytes,
                     &e.adam.device_chunks,
                     &e.adam.queued_chunks,
                     &e.adam.early_chunks,
                     &e.adam.host_bytes,
                     &e.adam.host_passes,
                     &e.adam.norm_host_bytes,
                     &e.adam.waited_behind,
                     &e.adam.cancelled_chunks,
                     &e.adam.speculated_chunks,
                     &e.adam.rolled_back_chunks,
                     &e.nvme.read_bytes,
                     &e.nvme.write_bytes,
                     &e.model_data_bytes,
                     &e.pinned.current,
                     &e.pinned.peak,
                     &e.pageable.current,
                     &e.pageable.peak,
                     &e.comm_bytes,
                     &e.comm_staged_bytes,
                     &e.comm_gathers_ahead,
                     &e.gathers,
                     &e.reductions})
    *v = 7;
  for (double* v : {&e.move_s, &e.adam.wait_s, &e.adam.early_s, &e.adam.host_s, &e.adam.rollback_s,
                    &e.nvme.wait_s, &e.comm_s, &e.comm_wait_s})
    *v = 0.25;
  return m;
}

// Note [one metric table]: each number's tag is its group and its key ("eval/loss" for the held-out
// loss), in one of the groups the docs describe, and no two share one.
TEST(MetricTableTest, EveryNumberHasAGroupedTagOfItsKey) {
  const std::set<std::string> groups = {"train", "eval", "perf", "memory", "engine",
                                        "adam",  "nvme", "comm", "moe"};
  std::set<std::string> tags;
  for (const MetricValue& v : metric_values(every_figure())) {
    const std::string key(v.key), tag(v.tag);
    if (key == "step" || key == "skipped") {
      EXPECT_TRUE(tag.empty()) << key << " is not a scalar: " << tag;
      continue;
    }
    ASSERT_FALSE(tag.empty()) << key;
    const std::string group = tag.substr(0, tag.find('/'));
    EXPECT_TRUE(groups.count(group)) << tag;
    EXPECT_EQ(tag, key == "eval_loss" ? std::string(kEvalLossTag) : group + "/" + key);
    EXPECT_TRUE(tags.insert(tag).second) << tag << " twice";
  }
  EXPECT_GE(tags.size(), 45u);
}

// Figures not measured (-1) and a step not evaluated are left out.
TEST(MetricTableTest, UnmeasuredFiguresAreLeftOut) {
  StepMetrics m;
  std::set<std::string> keys;
  for (const MetricValue& v : metric_values(m)) keys.insert(std::string(v.key));
  EXPECT_TRUE(keys.count("loss"));
  EXPECT_FALSE(keys.count("eval_loss"));
  EXPECT_FALSE(keys.count("tflops"));
  EXPECT_FALSE(keys.count("device_peak_bytes"));
  EXPECT_FALSE(keys.count("comm_s"));
}

// docs/training.md#tensorboard lists exactly the tags the table gives.
TEST(MetricTableTest, DocsListEveryTag) {
  const std::string doc =
      pstar::testing::read_text(std::string(PSTAR_SOURCE_DIR) + "/docs/training.md");
  const size_t begin = doc.find("\n## TensorBoard");
  ASSERT_NE(begin, std::string::npos) << "docs/training.md has no TensorBoard section";
  const size_t end = doc.find("\n## ", begin + 1);
  const std::string section = doc.substr(begin, end - begin);
  std::set<std::string> documented;
  static const std::regex kTag("`((train|eval|perf|memory|engine|adam|nvme|comm|moe)/[a-z0-9_]+)`");
  for (std::sregex_iterator it(section.begin(), section.end(), kTag), last; it != last; ++it)
    documented.insert((*it)[1]);
  std::set<std::string> tags;
  for (const MetricValue& v : metric_values(every_figure()))
    if (!v.tag.empty()) tags.insert(std::string(v.tag));
  for (const std::string& tag : tags) EXPECT_TRUE(documented.count(tag)) << tag << " undocumented";
  for (const std::string& tag : documented) EXPECT_TRUE(tags.count(tag)) << tag << " is no tag";
}

class TensorBoardTrainerTest : public ::testing::Test {
 protected:
  config::TrainConfig config() const {
    config::TrainConfig c;
    c.model.preset = "gpt-tiny";
    c.model.seq_len = 32;
    c.data.text = corpus_;
    c.train_micro_batch_size_per_gpu = 4;
    c.training.steps = 5;
    c.training.log_interval = 2;
    c.training.tensorboard_dir = dir_.file("tb");
    c.engine.mode = config::EngineMode::kTorch;
    return c;
  }
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }
  std::string event_file() const {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir_.file("tb")))
      files.push_back(entry.path().string());
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? "" : files[0];
  }
  // The steps whose scalars are in the file now.
  std::vector<int64_t> steps_on_disk() const {
    std::vector<int64_t> steps;
    for (const ReadEvent& e : read_events(event_file()))
      if (!e.scalars.empty()) steps.push_back(e.step);
    return steps;
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

// Note [tensorboard flushes]: the file holds the version, the config at step 0 and, flushed, the
// steps the console logs as lines (1, every log_interval-th, the last); each step's scalars are its
// metrics.
TEST_F(TensorBoardTrainerTest, WritesTheStepsAsTheyAreLogged) {
  const config::TrainConfig c = config();
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  std::vector<StepMetrics> done;
  {
    Trainer trainer(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
    const auto start = read_events(event_file());
    ASSERT_EQ(start.size(), 2u);
    EXPECT_EQ(start[0].file_version, "brain.Event:2");
    ASSERT_EQ(start[1].texts.size(), 1u);
    EXPECT_EQ(start[1].step, 0);
    EXPECT_EQ(start[1].texts[0].first, "config");
    // The resolved config, as a markdown code block (each line indented by four spaces).
    const std::string text =
        std::regex_replace(start[1].texts[0].second, std::regex("\n    "), "\n");
    const auto config_json = nlohmann::json::parse(text.substr(4));
    EXPECT_EQ(config_json["training"]["tensorboard_dir"], c.training.tensorboard_dir);
    EXPECT_EQ(config_json["training"]["steps"], 5);

    const std::vector<std::vector<int64_t>> expected = {
        {1}, {1, 2}, {1, 2}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}};
    for (size_t i = 0; i < expected.size(); ++i) {
      done.push_back(trainer.step());
      EXPECT_EQ(steps_on_disk(), expected[i]) << "after step " << i + 1;
    }
  }
  const auto events = read_events(event_file());
  ASSERT_EQ(events.size(), 7u);
  for (size_t i = 0; i < done.size(); ++i) {
    const ReadEvent& e = events[i + 2];
    const StepMetrics& m = done[i];
    EXPECT_EQ(e.step, m.step);
    std::map<std::string, float> got(e.scalars.begin(), e.scalars.end());
    EXPECT_EQ(got.at("train/loss"), static_cast<float>(m.loss));
    EXPECT_EQ(got.at("train/lr"), static_cast<float>(m.lr));
    EXPECT_EQ(got.at("train/grad_norm"), static_cast<float>(m.grad_norm));
    EXPECT_EQ(got.at("perf/tokens_per_s"), static_cast<float>(m.tokens_per_s));
    EXPECT_EQ(got.at("train/tokens"), static_cast<float>(m.tokens));
    EXPECT_GT(m.tflops, 0);  // the model was built from the config: its FLOPs are known
    EXPECT_EQ(got.at("perf/tflops"), static_cast<float>(m.tflops));
    EXPECT_FALSE(got.count("memory/device_peak_bytes"));  // the torch engine does not measure it
  }
}

// Without the key, no directory and no file.
TEST_F(TensorBoardTrainerTest, NoDirectoryNoFile) {
  config::TrainConfig c = config();
  c.training.tensorboard_dir.clear();
  TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  Trainer trainer(c, build_model_and_engine(pstar::testing::cpu_plan(c)), o);
  trainer.step();
  EXPECT_FALSE(fs::exists(dir_.file("tb")));
}

}  // namespace
}  // namespace pstar::train
