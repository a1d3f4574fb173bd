// `pstar train --tensorboard DIR` end to end (docs/training.md#tensorboard): the event files read
// back by tests/cmd/tensorboard_reader.py, which shares no code with pstar, against the same run's
// metrics; a run stopped by SIGTERM and resumed; a write error that training survives.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "event_file_reader.h"
#include "metrics_util.h"
#include "tensorboard_util.h"
#include "test_util.h"
#include "tiny_run.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

class TensorBoardCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = protobuf_python();
    fs::create_directories(dir_.path() / "conf");
    write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
  }

  // tiny_chunked_config (the engine's figures are measured) with a held-out tenth of the corpus
  // evaluated every second step, and few flushes of the event file.
  static json config() {
    json c = tiny_chunked_config(4);
    c["data"]["eval_fraction"] = 0.1;
    c["training"]["log_interval"] = 1000;
    c["training"]["eval_interval"] = 2;
    c["training"]["eval_batches"] = 2;
    return c;
  }
  void write_config(const json& c) { write_text(dir_.file("conf/train.json"), c.dump(2)); }
  static std::vector<std::string> args(const std::vector<std::string>& extra) {
    return cpu_train_args("conf/train.json", extra);
  }
  std::vector<std::string> event_files() const {
    std::vector<std::string> files;
    if (fs::exists(dir_.file("tb")))
      for (const auto& entry : fs::directory_iterator(dir_.file("tb")))
        files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    return files;
  }

  std::string python_;
  ScratchDir dir_;
};

// Every scalar equals the metrics' number at its step (the reader's check), and the file holds the
// run's config and the tags of each group.
TEST_F(TensorBoardCliTest, ScalarsEqualTheMetricsOfTheSameRun) {
  if (python_.empty()) GTEST_SKIP() << kNoProtobuf;
  write_config(config());
  const RunResult r = run_pstar(args({"--metrics", "m.jsonl", "--tensorboard", "tb"}), dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r;
  ASSERT_EQ(event_files().size(), 1u);
  EXPECT_TRUE(contains(r.err, "[pstar] tensorboard: tb/events.out.tfevents.")) << r;
  const ReaderResult read = read_tensorboard(python_, dir_.path(), "tb", {"m.jsonl"});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  const json& file = read.summary["files"][0];
  EXPECT_EQ(file["steps"].get<std::vector<int64_t>>(), range(1, 4));
  EXPECT_TRUE(file["session_start"].is_null());
  EXPECT_EQ(file["config_step"], 0);
  EXPECT_EQ(file["config"]["training"]["steps"], 4);
  EXPECT_EQ(file["config"]["training"]["tensorboard_dir"], "tb");
  const auto tags = read.summary["tags"].get<std::vector<std::string>>();
  for (const char* tag : {"train/loss", "train/lr", "train/grad_norm", "eval/loss",
                          "perf/tokens_per_s", "perf/tflops", "memory/device_peak_bytes",
                          "engine/moved_h2d_bytes", "adam/adam_device_chunks"})
    EXPECT_NE(std::find(tags.begin(), tags.end(), tag), tags.end()) << tag;
  // 4 steps of about 30 numbers each.
  EXPECT_GT(read.summary["compared"].get<int64_t>(), 4 * 25);
}

// A run stopped by SIGTERM flushes its event file (log_interval is far away) and a resumed run
// writes a second one, from the next step on, marked as a restart there.
TEST_F(TensorBoardCliTest, SigtermAndResumeLeaveTwoFilesWhoseStepsDoNotOverlap) {
  if (python_.empty()) GTEST_SKIP() << kNoProtobuf;
  json c = config();
  c["data"].erase("eval_fraction");
  c["training"]["eval_interval"] = 0;
  c["training"]["save_dir"] = "ck";
  c["training"]["steps"] = 100000;
  write_config(c);
  Spawned child =
      spawn_pstar(args({"--metrics", "first.jsonl", "--tensorboard", "tb"}), dir_.path());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_metrics(dir_.file("first.jsonl")).size() < 3 &&
         std::chrono::steady_clock::now() < deadline && kill(child.pid, 0) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(child.pid, SIGTERM);
  const RunResult first = wait_pstar(child, 120);
  ASSERT_EQ(first.exit_code, 143) << first;
  const auto k = static_cast<int64_t>(read_metrics(dir_.file("first.jsonl")).size());
  ASSERT_GE(k, 3);
  const RunResult resumed =
      run_pstar(args({"--resume", "ck", "--set", "training.steps=" + std::to_string(k + 2),
                      "--metrics", "resumed.jsonl", "--tensorboard", "tb"}),
                dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed;
  EXPECT_TRUE(contains(resumed.err, "(continuing from step " + std::to_string(k) + ")")) << resumed;
  ASSERT_EQ(event_files().size(), 2u);
  const ReaderResult read =
      read_tensorboard(python_, dir_.path(), "tb", {"first.jsonl", "resumed.jsonl"});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  // Which file is which: by their steps, not their names (two runs may start in one second).
  json files = read.summary["files"];
  ASSERT_EQ(files.size(), 2u);
  if (files[0]["steps"][0] != 1) std::swap(files[0], files[1]);
  EXPECT_EQ(files[0]["steps"].get<std::vector<int64_t>>(), range(1, k));
  EXPECT_TRUE(files[0]["session_start"].is_null());
  EXPECT_EQ(files[1]["steps"].get<std::vector<int64_t>>(), range(k + 1, k + 2));
  EXPECT_EQ(files[1]["session_start"], k + 1);
  EXPECT_EQ(files[1]["config"]["training"]["steps"], k + 2);
}

// A write that fails (the file-size limit, as a full disk) is a warning: training runs to its end,
// and the file keeps its whole records.
TEST_F(TensorBoardCliTest, WriteErrorIsAWarningAndTrainingGoesOn) {
  json c = config();
  c["data"].erase("eval_fraction");
  c["training"]["eval_interval"] = 0;
  c["training"]["steps"] = 12;
  c["training"]["log_interval"] = 4;
  write_config(c);
  // The version (42 bytes), the config (2.4 kB) and a few steps of 0.8 kB; the log (stderr, which
  // the limit caps too) stays under it.
  constexpr long kLimit = 6000;
  Spawned child = spawn_pstar(args({"--tensorboard", "tb"}), dir_.path(), {}, kLimit);
  const RunResult r = wait_pstar(child, 300);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "done: 12 steps")) << r;
  EXPECT_TRUE(contains(r.err, "warning")) << r;
  EXPECT_TRUE(contains(r.err, "tensorboard: cannot write tb/events.out.tfevents.")) << r;
  EXPECT_TRUE(contains(r.err, "the run goes on without them")) << r;
  const auto files = event_files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_LE(fs::file_size(files[0]), static_cast<uintmax_t>(kLimit));
  const auto events = pstar::testing::read_events(files[0]);  // fails the test on a partial record
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
}

}  // namespace
}  // namespace pstar::cmd
