// Multi-rank `pstar train` at start-up and when things go wrong: the global batch, each rank's
// device and backend, nccl refused, a graceful stop, a killed rank, different configs, a taken
// port, an unreachable master, too few chunks, and ranks started as Slurm starts them.
#include "train_dist_fixture.h"

namespace pstar::cmd {
namespace {

using namespace pstar::cmd::dist_testing;  // NOLINT(build/namespaces): the shared fixture

TEST_F(DistTrainTest, TrainBatchSizeCountsEveryRank) {
  json c = config(/*micro_batch=*/2, /*steps=*/2);
  c["train_batch_size"] = 4;
  const RunResult ok = train(write_config(c), {"--nproc", "2"});
  EXPECT_EQ(ok.exit_code, 0) << ok;
  c["train_batch_size"] = 2;
  const RunResult refused = train(write_config(c, "wrong.json"), {"--nproc", "2"});
  EXPECT_EQ(refused.exit_code, 2) << refused;
  EXPECT_NE(refused.err.find("train_batch_size: expected train_micro_batch_size_per_gpu (2) * "
                             "gradient_accumulation_steps (1) * world size (2) = 4, found 2"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refused.err.find("step 1/"), std::string::npos) << "trained before refusing";
  // One rank: the product without the second rank.
  const RunResult single = train("conf/wrong.json", {});
  EXPECT_EQ(single.exit_code, 0) << single;
}

// Note [rank device]: every rank names its own device and the collectives in the start-up log (the
// others' lines are otherwise warnings only); on the CPU that is gloo, and distributed.share_gpus
// changes nothing there.
TEST_F(DistTrainTest, EachRankNamesItsDeviceAndBackend) {
  const RunResult r = train(write_config(config(/*micro_batch=*/2, /*steps=*/1)),
                            {"--nproc", "2", "--set", "distributed.share_gpus=true"});
  ASSERT_EQ(r.exit_code, 0) << r;
  for (const char* rank : {"r0", "r1"}) {
    EXPECT_NE(r.err.find(std::string("[pstar ") + rank + "] device: cpu, collectives over gloo"),
              std::string::npos)
        << rank << "'s device line is missing:\n"
        << r;
  }
  // The node's two ranks split engine.host_memory (1GB): the plan line gives both figures.
  EXPECT_NE(r.err.find("chunks on the host tier (476.84 MiB per rank, 953.67 MiB for the 2 ranks "
                       "of this node)"),
            std::string::npos)
      << r;
  // -q keeps every rank's info lines out, this one too.
  const RunResult quiet = train("conf/train.json", {"--nproc", "2", "-q"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet;
  EXPECT_EQ(quiet.err.find("device: "), std::string::npos) << quiet;
}

// distributed.backend "nccl": this build has no NCCL communicator, and the CPU none to join, so
// every rank stops at start-up with the key named and what works, before any training; and one
// rank does the same.
TEST_F(DistTrainTest, NcclIsRefusedNamingWhatWorks) {
  const std::string path = write_config(config(/*micro_batch=*/2, /*steps=*/1));
  for (const std::vector<std::string>& ranks :
       {std::vector<std::string>{"--nproc", "2"}, std::vector<std::string>{}}) {
    std::vector<std::string> extra = ranks;
    extra.insert(extra.end(), {"--set", "distributed.backend=nccl"});
    const RunResult r = train(path, extra);
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_NE(r.err.find("distributed.backend \"nccl\": NCCL joins GPUs, and this run computes on "
                         "the CPU; set distributed.backend \"gloo\" or \"auto\""),
              std::string::npos)
        << r;
    EXPECT_EQ(r.err.find("step 1/"), std::string::npos) << "trained before refusing";
  }
  const RunResult gloo = train(path, {"--nproc", "2", "--set", "distributed.backend=gloo"});
  EXPECT_EQ(gloo.exit_code, 0) << gloo;
}

// The same global batch of 4 sequences, on 1, 2 and 4 ranks: the same losses; each rank holds its
// share of the model data; the bytes each rank sends are what ZeRO's schedule says.

TEST_F(DistTrainTest, SigtermStopsEveryRankAtTheSameStepWithACheckpoint) {
  json c = config(2, 100000);
  c["training"]["lr_schedule"] = {{"type", "constant"}};
  c["training"]["save_dir"] = "ckpt";
  const std::string cfg = write_config(c);
  Spawned launcher = spawn_pstar(
      {"train", cfg, "--device", "cpu", "--nproc", "2", "--metrics", "first.jsonl"}, dir_.path());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  // Complete step lines (the start-up record, with its "record" key, is not a step).
  auto lines = [&](const std::string& f) {
    if (!fs::exists(dir_.file(f))) return 0L;
    const std::string t = read_text(dir_.file(f));
    long n = 0;
    for (size_t at = 0, end; (end = t.find('\n', at)) != std::string::npos; at = end + 1)
      n += t.substr(at, end - at).find("\"record\"") == std::string::npos ? 1 : 0;
    return n;
  };
  while (lines("first.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(launcher.pid, SIGTERM);
  const RunResult r = wait_pstar(launcher, 120);
  ASSERT_EQ(r.exit_code, 143) << r;
  const auto first = read_metrics(dir_.file("first.jsonl"));
  const auto other = read_metrics(dir_.file("first.jsonl.rank1"));
  const auto k = static_cast<int64_t>(first.size());
  ASSERT_GE(k, 3);
  EXPECT_EQ(static_cast<int64_t>(other.size()), k) << "the ranks stopped at different steps";
  EXPECT_TRUE(contains(r.err, "stopped on SIGTERM after step " + std::to_string(k))) << r;
  char name[32];
  std::snprintf(name, sizeof name, "ckpt/step-%08lld", static_cast<long long>(k));
  const json manifest = json::parse(read_text(dir_.file(std::string(name) + "/manifest.json")));
  EXPECT_EQ(manifest["world_size"], 2);
  EXPECT_EQ(manifest["step"], k);
  EXPECT_EQ(manifest["crc32"].size(), 2u);
  EXPECT_EQ(read_text(dir_.file("ckpt/latest")), fs::path(name).filename().string() + "\n");

  // The continuation against an uninterrupted run of the same length.
  const std::string steps = "training.steps=" + std::to_string(k + 2);
  auto ref = train(cfg, {"--nproc", "2", "--set", steps, "--set", "training.save_dir=", "--metrics",
                         "ref.jsonl"});
  ASSERT_EQ(ref.exit_code, 0) << ref;
  auto resumed = train(
      cfg, {"--nproc", "2", "--set", steps, "--resume", "ckpt", "--metrics", "resumed.jsonl"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed;
  const auto a = read_metrics(dir_.file("ref.jsonl"));
  const auto b = read_metrics(dir_.file("resumed.jsonl"));
  ASSERT_EQ(static_cast<int64_t>(a.size()), k + 2);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(b[i]["loss"].get<double>(), a[k + i]["loss"].get<double>()) << "step " << k + i + 1;
}

// SIGKILL one of two ranks mid-run: the other stops with a distributed error, well within 60 s.
TEST_F(DistTrainTest, AKilledRankStopsTheOthersWithADistributedError) {
  const std::string cfg = write_config(config(2, 100000));
  const int port = free_port();
  Spawned r0 = spawn_rank(cfg, 0, 2, port, {"--metrics", "m.jsonl"});
  Spawned r1 = spawn_rank(cfg, 1, 2, port, {"--metrics", "m.jsonl"});
  kill_rank1_and_expect_rank0_to_stop(r0, r1, "m.jsonl.rank1");
}

TEST_F(DistTrainTest, RanksWithDifferentConfigsStopAtStartUp) {
  const std::string cfg = write_config(config(2, 3));
  const int port = free_port();
  Spawned r0 = spawn_rank(cfg, 0, 2, port);
  Spawned r1 = spawn_rank(cfg, 1, 2, port, {"--set", "training.steps=4"});
  const RunResult a = wait_pstar(r0, 60), b = wait_pstar(r1, 60);
  for (const RunResult* r : {&a, &b}) {
    EXPECT_EQ(r->exit_code, 2) << *r;
    EXPECT_TRUE(contains(r->err, "rank 1's config differs from rank 0's at training.steps")) << *r;
  }
}

TEST_F(DistTrainTest, ATakenPortIsAClearError) {
  const Listener taken;
  const std::string cfg = write_config(config(2, 3));
  const auto r = train(
      cfg, {"--nproc", "2", "--master-port", std::to_string(taken.port()), "--dist-timeout", "20"});
  EXPECT_EQ(r.exit_code, 6) << r;
  EXPECT_TRUE(
      contains(r.err, "cannot host the rendezvous at 127.0.0.1:" + std::to_string(taken.port())))
      << r;
  EXPECT_TRUE(contains(r.err, "rank 0 exited with code 6")) << r;
}

TEST_F(DistTrainTest, AnUnreachableMasterIsAClearError) {
  const std::string cfg = write_config(config(2, 3));
  std::vector<std::string> args{"train", cfg, "--device", "cpu", "--dist-timeout", "3"};
  const auto begin = std::chrono::steady_clock::now();
  const auto r = run_pstar(args, dir_.path(),
                           {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                            "MASTER_PORT=" + std::to_string(free_port())});
  EXPECT_EQ(r.exit_code, 6) << r;
  EXPECT_TRUE(contains(r.err, "rank 1 cannot reach the master at 127.0.0.1:")) << r;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(), 60);
}

TEST_F(DistTrainTest, MoreRanksThanChunksIsAClearErrorAndTheLauncherStopsAll) {
  json c = config(1, 3);
  c["default_chunk_size"] = 60000;  // 3 chunks
  const std::string cfg = write_config(c);
  const auto r = train(cfg, {"--nproc", "4"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "fewer than the 4 ranks")) << r;
  EXPECT_TRUE(contains(r.err, "exited with code 2")) << r;
}

// srun's variables, the first host of the node list as the master.
TEST_F(DistTrainTest, RanksJoinUnderSlurm) {
  const std::string cfg = write_config(config(2, 2));
  const std::string port = std::to_string(free_port());
  std::vector<Spawned> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(spawn_pstar({"train", cfg, "--device", "cpu", "--dist-timeout", "30"},
                                dir_.path(),
                                {"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=2",
                                 "SLURM_LOCALID=" + std::to_string(r), "SLURM_NTASKS_PER_NODE=2",
                                 "SLURM_JOB_NODELIST=localhost", "MASTER_PORT=" + port}));
  }
  for (auto& rank : ranks) {
    const RunResult r = wait_pstar(rank, 120);
    EXPECT_EQ(r.exit_code, 0) << r;
  }
}

}  // namespace
}  // namespace pstar::cmd
