// `pstar train` under the faults a days-long run meets: SIGTERM/SIGINT (graceful stop), a second
// signal, kill -9 during a checkpoint write, a full disk during a save, a non-finite loss, an
// unwritable save_dir, a corrupt latest checkpoint, and retention. Each runs the binary as a
// subprocess and checks what is left on disk with the engine's own checkpoint readers.
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "metrics_util.h"
#include "pstar/checkpoint/store.h"
#include "test_util.h"
#include "tiny_run.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

using Clock = std::chrono::steady_clock;

// Complete step lines of a metrics file another process is appending to (not its start-up
// record, the one line with a "record" key).
int64_t count_lines(const std::string& path) {
  if (!fs::exists(path)) return 0;
  const std::string text = read_text(path);
  int64_t n = 0;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
    n += text.compare(at, 1, "{") == 0 &&
         text.substr(at, end - at).find("\"record\"") == std::string::npos;
  return n;
}

// Every `.tmp.` file under `dir` (temporaries of atomic writes).
std::vector<fs::path> temporaries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find(".tmp.") != std::string::npos)
      out.push_back(it->path());
  return out;
}

class ReliabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "conf");
    write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
    write_config(config());
  }

  // tiny_chunked_config (chunks move every step, a constant learning rate) with per-step logs.
  static json config() {
    json c = tiny_chunked_config(6);
    c["training"]["log_interval"] = 1;
    return c;
  }
  void write_config(const json& c) { write_text(dir_.file("conf/train.json"), c.dump(2)); }

  static std::vector<std::string> args(const std::vector<std::string>& extra) {
    return cpu_train_args("conf/train.json", extra);
  }
  RunResult train(const std::vector<std::string>& extra, long max_file_bytes = -1) {
    Spawned child = spawn_pstar(args(extra), dir_.path(), {}, max_file_bytes);
    return wait_pstar(child, 300);
  }
  Spawned spawn(const std::vector<std::string>& extra) {
    return spawn_pstar(args(extra), dir_.path());
  }

  // Waits until `path` has `lines` complete lines or the child ends; false on timeout or end.
  bool wait_for_lines(const Spawned& child, const std::string& path, int64_t lines) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline) {
      if (count_lines(path) >= lines) return true;
      if (kill(child.pid, 0) != 0) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // Losses of steps 1..n from a fresh uninterrupted run.
  std::vector<double> reference(int64_t steps) {
    const std::string file = "ref-" + std::to_string(steps) + ".jsonl";
    const auto r = train({"--set", "training.steps=" + std::to_string(steps), "--metrics", file});
    EXPECT_EQ(r.exit_code, 0) << r;
    std::vector<double> out;
    for (const auto& m : read_metrics(dir_.file(file))) out.push_back(m["loss"].get<double>());
    return out;
  }

  std::string ck(int64_t step) const { return checkpoint::checkpoint_dir("ck", step); }
  std::string latest() const { return checkpoint::resolve_resume_dir(dir_.file("ck")).dir; }

  // Continues from `ck` to `steps` (with `extra` options) and checks every step after `from`
  // against a fresh run.
  void expect_exact_resume(int64_t from, int64_t steps, std::vector<std::string> extra = {}) {
    const auto ref = reference(steps);
    ASSERT_EQ(static_cast<int64_t>(ref.size()), steps);
    extra.insert(extra.end(), {"--resume", "ck", "--set", "training.steps=" + std::to_string(steps),
                               "--metrics", "resumed.jsonl"});
    const auto r = train(extra);
    ASSERT_EQ(r.exit_code, 0) << r;
    const auto resumed = read_metrics(dir_.file("resumed.jsonl"));
    ASSERT_EQ(static_cast<int64_t>(resumed.size()), steps - from) << r;
    for (int64_t s = from + 1; s <= steps; ++s) {
      const auto& m = resumed[static_cast<size_t>(s - from - 1)];
      EXPECT_EQ(m["step"].get<int64_t>(), s);
      EXPECT_EQ(m["loss"].get<double>(), ref[static_cast<size_t>(s - 1)]) << "step " << s;
    }
  }

  ScratchDir dir_;
};

TEST_F(ReliabilityTest, SigtermFinishesTheStepSavesAndResumesExactly) {
  Spawned child = spawn({"--set", "training.steps=100000", "--set", "training.save_dir=ck",
                         "--metrics", "first.jsonl"});
  ASSERT_TRUE(wait_for_lines(child, dir_.file("first.jsonl"), 3));
  kill(child.pid, SIGTERM);
  const RunResult r = wait_pstar(child, 120);
  // 128 + SIGTERM, after the checkpoint (docs/cli.md).
  ASSERT_EQ(r.exit_code, 143) << r;
  const auto first = read_metrics(dir_.file("first.jsonl"));
  const auto k = static_cast<int64_t>(first.size());
  ASSERT_GE(k, 3);
  EXPECT_TRUE(contains(r.err, "stopped on SIGTERM after step " + std::to_string(k) + " of 100000"))
      << r;
  EXPECT_TRUE(contains(r.err, "--resume ck")) << r;
  EXPECT_EQ(latest(), dir_.file(ck(k)));
  EXPECT_EQ(checkpoint::checkpoint_problem(dir_.file(ck(k))), "");
  EXPECT_TRUE(temporaries(dir_.file("ck")).empty());
  expect_exact_resume(k, k + 3);
}

// Note [speculative adam]: a SIGTERM while host Adam is speculated in the backward and, with
// clipping on every step, redone or cancelled: the checkpoint is the last whole step's, and the
// resumed run continues bit for bit as a run without the worker at all.
TEST_F(ReliabilityTest, SigtermDuringSpeculatedStepsResumesExactly) {
  json c = config();
  // Every step clips: every speculated chunk is redone, or its update cancelled before it started.
  c["gradient_clipping"] = 0.05;
  c["engine"]["overlap_adam"] = true;
  c["engine"]["speculative_adam"] = true;
  write_config(c);
  Spawned child = spawn({"--set", "training.steps=100000", "--set", "training.save_dir=ck",
                         "--metrics", "first.jsonl"});
  ASSERT_TRUE(wait_for_lines(child, dir_.file("first.jsonl"), 4));
  kill(child.pid, SIGTERM);
  const RunResult r = wait_pstar(child, 120);
  ASSERT_EQ(r.exit_code, 143) << r;
  const auto first = read_metrics(dir_.file("first.jsonl"));
  const auto k = static_cast<int64_t>(first.size());
  int64_t speculated = 0, undone = 0;
  for (const auto& m : first) {
    speculated += m.value("adam_speculated_chunks", int64_t{0});
    undone += m.value("adam_rolled_back_chunks", int64_t{0}) +
              m.value("adam_cancelled_chunks", int64_t{0});
  }
  EXPECT_GT(speculated, 0) << "nothing was speculated";
  EXPECT_EQ(undone, speculated) << "every step clips";
  EXPECT_EQ(checkpoint::checkpoint_problem(dir_.file(ck(k))), "");
  expect_exact_resume(k, k + 3);
  // And the same losses without the worker, without speculation.
  const auto resumed = read_metrics(dir_.file("resumed.jsonl"));
  const auto plain =
      train({"--set", "engine.overlap_adam=false", "--set", "engine.speculative_adam=false",
             "--set", "training.steps=" + std::to_string(k + 3), "--metrics", "plain.jsonl"});
  ASSERT_EQ(plain.exit_code, 0) << plain;
  const auto without = read_metrics(dir_.file("plain.jsonl"));
  ASSERT_EQ(static_cast<int64_t>(without.size()), k + 3);
  for (int64_t s = 1; s <= k; ++s)
    EXPECT_EQ(first[static_cast<size_t>(s - 1)]["loss"],
              without[static_cast<size_t>(s - 1)]["loss"])
        << "step " << s;
  for (size_t i = 0; i < resumed.size(); ++i)
    EXPECT_EQ(resumed[i]["loss"], without[static_cast<size_t>(k) + i]["loss"])
        << "step " << k + 1 + i;
}

// The NVMe tier's directory goes with a graceful stop, and one a SIGKILL left behind is reported
// and removed by the next run (Note [nvme run directory]).
TEST_F(ReliabilityTest, TheNvmeDirectoryGoesOnSigtermAndAfterSigkillAtTheNextStart) {
  // A deep, narrow bf16 GPT of 31 chunks whose optimizer payloads mostly live on NVMe: the host
  // holds every compute payload (40000 B), the staging pool and one more payload, not whole chunks.
  json c = config();
  c["model"] = {{"hidden", 64}, {"layers", 10}, {"heads", 4}, {"vocab_size", 256}, {"seq_len", 16}};
  c["train_micro_batch_size_per_gpu"] = 1;
  c["use_cpu_embedding"] = false;
  c["bf16"]["enabled"] = true;
  c["engine"]["activation_checkpointing"] = true;
  c["engine"]["device_memory"] = "2MB";
  c["engine"]["host_memory"] = 31 * 40000 + 4 * 241664 + 40000;
  c["engine"]["nvme_path"] = "nvme";
  write_config(c);
  fs::create_directories(dir_.path() / "nvme");
  const auto in_nvme = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_.path() / "nvme"))
      names.push_back(e.path().filename().string());
    return names;
  };
  Spawned child = spawn({"--set", "training.steps=100000", "--set", "training.save_dir=ck",
                         "--metrics", "first.jsonl"});
  ASSERT_TRUE(wait_for_lines(child, dir_.file("first.jsonl"), 2));
  ASSERT_EQ(in_nvme().size(), 1u) << "no NVMe run directory while training";
  kill(child.pid, SIGTERM);
  RunResult r = wait_pstar(child, 120);
  ASSERT_EQ(r.exit_code, 143) << r;
  EXPECT_TRUE(contains(r.err, "with their optimizer payloads on NVMe")) << r;
  EXPECT_TRUE(in_nvme().empty()) << in_nvme()[0];
  EXPECT_EQ(checkpoint::checkpoint_problem(latest()), "");

  Spawned killed = spawn({"--set", "training.steps=100000", "--metrics", "second.jsonl"});
  ASSERT_TRUE(wait_for_lines(killed, dir_.file("second.jsonl"), 2));
  kill(killed.pid, SIGKILL);
  r = wait_pstar(killed, 120);
  ASSERT_EQ(in_nvme().size(), 1u) << "SIGKILL runs no cleanup";
  const std::string stale = in_nvme()[0];
  r = train({"--set", "training.steps=1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "removing the stale directory")) << r;
  EXPECT_TRUE(contains(r.err, stale)) << r;
  EXPECT_TRUE(in_nvme().empty()) << in_nvme()[0];
}

TEST_F(ReliabilityTest, SigintWithoutASaveDirSaysNoCheckpointWasWritten) {
  Spawned child = spawn({"--set", "training.steps=100000", "--metrics", "m.jsonl"});
  ASSERT_TRUE(wait_for_lines(child, dir_.file("m.jsonl"), 2));
  kill(child.pid, SIGINT);
  const RunResult r = wait_pstar(child, 120);
  EXPECT_EQ(r.exit_code, 130) << r;
  EXPECT_TRUE(contains(r.err, "stopped on SIGINT after step")) << r;
  EXPECT_TRUE(contains(r.err, "no checkpoint was written")) << r;
}

TEST_F(ReliabilityTest, ASecondSignalStopsAtOnceAndKeepsTheLastCheckpoint) {
  // Steps of a second or more made of short micro-batches: a stop asked for inside a step finishes
  // it (the rest is under the 10 s after which a step would be abandoned). Both signals are timed
  // from the run's own step time so that they land inside the same step on any machine.
  json c = config();
  c["train_micro_batch_size_per_gpu"] = 8;
  c["model"]["seq_len"] = 128;
  c["gradient_accumulation_steps"] = 24;
  c["engine"]["device_memory"] = "400MB";
  write_config(c);
  Spawned child = spawn({"--set", "training.steps=100000", "--set", "training.save_dir=ck", "--set",
                         "training.save_interval=1", "--metrics", "m.jsonl"});
  ASSERT_TRUE(wait_for_lines(child, dir_.file("m.jsonl"), 2));
  // Step 2's line came at its end (before its checkpoint); step 3 takes about as long.
  const double step_s = read_metrics(dir_.file("m.jsonl"))[1]["step_time_s"].get<double>();
  const auto at = [&](double fraction) {
    return std::chrono::microseconds(static_cast<int64_t>(fraction * step_s * 1e6));
  };
  std::this_thread::sleep_for(at(0.3));
  kill(child.pid, SIGTERM);
  // Apart: two SIGTERMs pending at once would be delivered as one.
  std::this_thread::sleep_for(std::max(at(0.2), std::chrono::microseconds(50000)));
  kill(child.pid, SIGTERM);
  const RunResult r = wait_pstar(child, 120);
  EXPECT_EQ(r.exit_code, 143) << r;
  EXPECT_TRUE(contains(r.err, "second SIGTERM: stopping now, without a checkpoint")) << r;
  EXPECT_FALSE(contains(r.err, "stopped on SIGTERM after step")) << r;
  const std::string last = latest();
  EXPECT_EQ(checkpoint::checkpoint_problem(last), "") << last;
  const int64_t k = checkpoint::read_manifest(last).step;
  expect_exact_resume(k, k + 1);
}

TEST_F(ReliabilityTest, KillDuringACheckpointWriteLeavesTheLastOneValid) {
  Spawned child = spawn({"--set", "training.steps=100000", "--set", "training.save_dir=ck", "--set",
                         "training.save_interval=1", "--metrics", "m.jsonl"});
  ASSERT_TRUE(wait_for_lines(child, dir_.file("m.jsonl"), 2));
  // Watch for a checkpoint file's temporary: the write is in progress while it exists.
  fs::path caught;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (caught.empty() && Clock::now() < deadline && kill(child.pid, 0) == 0) {
    for (const auto& t : temporaries(dir_.file("ck"))) {
      if (t.filename().string().rfind(".ckpt-0.pt.tmp.", 0) != 0) continue;
      kill(child.pid, SIGKILL);
      caught = t;
      break;
    }
  }
  const RunResult r = wait_pstar(child, 120);
  ASSERT_FALSE(caught.empty()) << "never saw a checkpoint being written\n" << r;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r;
  // The kill hit the write: its temporary is still there, in a directory `latest` does not name.
  EXPECT_TRUE(fs::exists(caught)) << caught;
  const std::string killed_dir = caught.parent_path().string();
  const std::string last = latest();
  EXPECT_NE(fs::path(last).filename(), fs::path(killed_dir).filename());
  EXPECT_EQ(checkpoint::checkpoint_problem(last), "") << last;
  const int64_t k = checkpoint::read_manifest(last).step;
  // The resumed run saves the killed step again over the debris, and cleans it up.
  expect_exact_resume(k, k + 3,
                      {"--set", "training.save_dir=ck", "--set", "training.save_interval=1"});
  EXPECT_TRUE(temporaries(dir_.file("ck")).empty());
  EXPECT_EQ(checkpoint::checkpoint_problem(latest()), "");
}

TEST_F(ReliabilityTest, AFullDiskDuringASaveIsAClearErrorAndCorruptsNothing) {
  auto r = train({"--set", "training.steps=4", "--set", "training.save_dir=ck", "--set",
                  "training.save_interval=2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto ckpt_bytes = static_cast<long>(fs::file_size(dir_.file(ck(4) + "/ckpt-0.pt")));
  // Files may grow to half a checkpoint: the log and metrics fit, the next checkpoint does not.
  r = train({"--resume", "ck", "--set", "training.steps=8", "--set", "training.save_dir=ck",
             "--set", "training.save_interval=2", "--metrics", "m.jsonl"},
            ckpt_bytes / 2);
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.err, "the checkpoint of step 6 was not saved")) << r;
  EXPECT_TRUE(contains(r.err, "File too large")) << r;
  EXPECT_TRUE(contains(r.err, "The last checkpoint, " + ck(4) + ", is intact")) << r;
  EXPECT_EQ(count_lines(dir_.file("m.jsonl")), 2);  // steps 5 and 6 trained
  EXPECT_FALSE(fs::exists(dir_.file(ck(6))));
  EXPECT_TRUE(temporaries(dir_.file("ck")).empty());
  EXPECT_EQ(latest(), dir_.file(ck(4)));
  EXPECT_EQ(checkpoint::checkpoint_problem(dir_.file(ck(4))), "");
  expect_exact_resume(4, 8);
}

TEST_F(ReliabilityTest, ANonFiniteLossStopsClearlyAndNamesTheLastCheckpoint) {
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    fs::remove_all(dir_.file("ck"));
    // A learning rate of 1e30 sends every weight to about ±1e30 in the first update; the second
    // forward overflows.
    const auto r = train({"--set", "training.steps=10", "--set", "training.save_dir=ck", "--set",
                          "training.save_interval=1", "--set", "optimizer.params.lr=1e30", "--set",
                          std::string("bf16.enabled=") + (bf16 ? "true" : "false")});
    EXPECT_EQ(r.exit_code, 7) << r;  // numeric error
    EXPECT_TRUE(contains(r.err, "step 2: the loss is not finite") ||
                contains(r.err, "step 2: the gradient norm is not finite"))
        << r;
    EXPECT_TRUE(contains(r.err, "the last checkpoint is " + ck(1))) << r;
    EXPECT_EQ(latest(), dir_.file(ck(1)));
    EXPECT_EQ(checkpoint::checkpoint_problem(dir_.file(ck(1))), "");
  }
}

TEST_F(ReliabilityTest, Fp16OverflowSkipsStepsAndCountsThem) {
  try {
    auto a = torch::ones({2, 2}, torch::kFloat16);
    (void)torch::matmul(a, a);
  } catch (const c10::Error&) {
    GTEST_SKIP() << "this LibTorch has no fp16 matmul on CPU, so fp16 training cannot run here";
  }
  // A loss scale of 2^40 overflows fp16 gradients until the scaler has halved it enough.
  const auto r =
      train({"--set", "training.steps=40", "--set", "bf16.enabled=false", "--set",
             "fp16.enabled=true", "--set", "fp16.initial_scale_power=40", "--metrics", "m.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "step 1: gradient overflow at loss scale")) << r;
  EXPECT_TRUE(contains(r.err, "(1 step skipped so far)")) << r;
  int64_t skipped = 0;
  for (const auto& m : read_metrics(dir_.file("m.jsonl"))) skipped += m["skipped"].get<bool>();
  EXPECT_GE(skipped, 20);
  EXPECT_TRUE(contains(r.err, "; " + std::to_string(skipped) + " skipped")) << r;
}

TEST_F(ReliabilityTest, AnUnwritableSaveDirIsFoundAtStartUp) {
  // A path under a regular file cannot be a directory, whoever runs the test (root included).
  const auto r = train({"--set", "training.steps=1000", "--set",
                        "training.save_dir=conf/train.json/ck", "--metrics", "m.jsonl"});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.err, "training.save_dir: cannot create conf/train.json/ck")) << r;
  EXPECT_EQ(count_lines(dir_.file("m.jsonl")), 0) << "it trained before finding out";
}

TEST_F(ReliabilityTest, ACorruptLatestCheckpointNamesTheNewestIntactOne) {
  auto r = train({"--set", "training.save_dir=ck", "--set", "training.save_interval=2", "--metrics",
                  "m.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto full = read_metrics(dir_.file("m.jsonl"));
  const std::string file = dir_.file(ck(6) + "/ckpt-0.pt");
  auto bytes = pstar::testing::read_bytes(file);
  bytes[bytes.size() / 2] ^= 0x01;  // one bit in the middle of the tensor data
  pstar::testing::write_bytes(file, bytes);
  r = train({"--resume", "ck"});
  EXPECT_EQ(r.exit_code, 4) << r;  // format error
  EXPECT_TRUE(contains(r.err, "checkpoint ck/step-00000006 is not intact")) << r;
  EXPECT_TRUE(contains(r.err, "CRC-32")) << r;
  EXPECT_TRUE(
      contains(r.err, "the newest intact one is " + ck(4) + ": continue with --resume " + ck(4)))
      << r;
  // As the message says.
  r = train({"--resume", ck(4), "--metrics", "resumed.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto resumed = read_metrics(dir_.file("resumed.jsonl"));
  ASSERT_EQ(resumed.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(resumed[i]["loss"], full[4 + i]["loss"]);
}

TEST_F(ReliabilityTest, KeepLastBoundsTheCheckpointsOnDisk) {
  auto r = train({"--set", "training.steps=10", "--set", "training.save_dir=ck", "--set",
                  "training.save_interval=2", "--set", "training.keep_last=2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<int64_t> left;
  for (const auto& e : checkpoint::list_checkpoints(dir_.file("ck"))) left.push_back(e.step);
  EXPECT_EQ(left, (std::vector<int64_t>{8, 10}));
  EXPECT_EQ(latest(), dir_.file(ck(10)));
  // 0 keeps every one.
  r = train({"--set", "training.steps=10", "--set", "training.save_dir=all", "--set",
             "training.save_interval=2", "--set", "training.keep_last=0"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(checkpoint::list_checkpoints(dir_.file("all")).size(), 5u);
}

}  // namespace
}  // namespace pstar::cmd
