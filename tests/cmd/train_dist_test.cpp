// Multi-rank `pstar train` end to end over Gloo on this machine: 1, 2 and 4 ranks agree, with
// accumulation, bf16, speculation, records, a Llama, the NVMe tier, the estimate and a resume (with
// rank 0's TensorBoard event file).
// Start-up checks and failures are in train_dist_failures_test.cpp. Each test runs several
// processes.
#include "train_dist_fixture.h"

#include "event_file_reader.h"

namespace pstar::cmd {
namespace {

using namespace pstar::cmd::dist_testing;  // NOLINT(build/namespaces): the shared fixture

TEST_F(DistTrainTest, OneTwoAndFourRanksAgreeAndShareTheModelData) {
  constexpr int64_t kSteps = 10, kGlobalBatch = 4;
  std::map<int64_t, std::vector<json>> rank0;
  ChunkPlan plan;
  int64_t whole_model_data = 0;
  for (int64_t n : {1, 2, 4}) {
    const std::string cfg = write_config(config(kGlobalBatch / n, kSteps));
    const std::string metrics = "metrics-" + std::to_string(n) + ".jsonl";
    const auto r = train(cfg, {"--nproc", std::to_string(n), "--metrics", metrics});
    ASSERT_EQ(r.exit_code, 0) << r;
    if (n == 1) plan = parse_chunk_plan(r.err);
    rank0[n] = read_metrics(dir_.file(metrics));
    ASSERT_EQ(rank0[n].size(), static_cast<size_t>(kSteps)) << r;
    if (n == 1) {
      whole_model_data = rank0[1].back()["model_data_bytes"].get<int64_t>();
      EXPECT_FALSE(rank0[1].back().contains("comm_bytes")) << "one rank communicates nothing";
      continue;
    }
    const int64_t chunk_whole = plan.chunk_size * plan.bytes_per_param;
    const int64_t padded = (plan.chunks + n - 1) / n * n;
    const int64_t groups = padded / n;
    for (int64_t rank = 0; rank < n; ++rank) {
      const std::string file =
          rank == 0 ? dir_.file(metrics) : dir_.file(metrics + ".rank" + std::to_string(rank));
      const auto lines = read_metrics(file);
      ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps)) << file;
      for (const json& m : lines) {
        // Model data per rank: 1/N of the whole, give or take the padding chunk.
        const int64_t mine = m["model_data_bytes"].get<int64_t>();
        EXPECT_NEAR(static_cast<double>(mine), static_cast<double>(whole_model_data) / n,
                    static_cast<double>(chunk_whole))
            << "rank " << rank << " of " << n << ", step " << m["step"];
        if (m["step"].get<int64_t>() == 1) continue;  // the warm-up gathers per module
        // After the warm-up: every group gathered once in forward and once in backward, except
        // the one the forward ends with (the tied LM head's, group 0), which the backward starts
        // with; every group reduced once; plus three scalar all-reduces (loss, gradient norm, and
        // the previous step's stop check, Note [graceful stop]).
        const int64_t gathers = 2 * groups - 1;
        EXPECT_EQ(m["gathers"].get<int64_t>(), gathers) << m.dump();
        EXPECT_EQ(m["reductions"].get<int64_t>(), groups) << m.dump();
        const int64_t theory = gathers * (n - 1) * plan.chunk_size * 4   // fp32 params
                               + groups * (n - 1) * plan.chunk_size * 4  // fp32 grads
                               + 3 * 8;
        EXPECT_EQ(m["comm_bytes"].get<int64_t>(), theory) << "rank " << rank << ": " << m.dump();
        EXPECT_GE(m["comm_s"].get<double>(), 0.0);
        EXPECT_LE(m["device_peak_bytes"].get<int64_t>(), int64_t{3} << 20) << m.dump();
      }
    }
  }
  for (int64_t n : {2, 4}) {
    for (int64_t i = 0; i < kSteps; ++i) {
      const double one = rank0[1][i]["loss"].get<double>();
      const double many = rank0[n][i]["loss"].get<double>();
      EXPECT_NEAR(many, one, 1e-5 * std::abs(one)) << n << " ranks, step " << i + 1;
      EXPECT_EQ(rank0[n][i]["tokens"], rank0[1][i]["tokens"]);
    }
  }
}

// Note [collectives beside compute]: the collectives on a communication thread (the default) and
// all on the main thread (PSTAR_OVERLAP_COMM=0) give the same losses and gradient norms bit for
// bit on 2 and 4 processes under a budget that moves chunks every step, send the same bytes in the
// same collectives, and only the first goes ahead.
TEST_F(DistTrainTest, CollectivesBesideComputeChangeNoBit) {
  for (int64_t n : {2, 4}) {
    std::map<bool, std::vector<json>> runs;
    for (const bool beside : {false, true}) {
      const std::string metrics =
          std::string("beside") + (beside ? "1-" : "0-") + std::to_string(n) + ".jsonl";
      const auto r =
          run_pstar({"train", write_config(config(4 / n, 5)), "--device", "cpu", "--nproc",
                     std::to_string(n), "--metrics", metrics},
                    dir_.path(), {beside ? "PSTAR_OVERLAP_COMM=1" : "PSTAR_OVERLAP_COMM=0"});
      ASSERT_EQ(r.exit_code, 0) << r;
      runs[beside] = read_metrics(dir_.file(metrics));
      ASSERT_EQ(runs[beside].size(), 5u) << r;
    }
    int64_t ahead = 0, moved = 0;
    for (size_t i = 0; i < 5; ++i) {
      const json& a = runs[false][i];
      const json& b = runs[true][i];
      EXPECT_EQ(b["loss"], a["loss"]) << n << " ranks, step " << i + 1;
      EXPECT_EQ(b["grad_norm"], a["grad_norm"]) << n << " ranks, step " << i + 1;
      for (const char* key : {"comm_bytes", "gathers", "reductions"})
        EXPECT_EQ(b[key], a[key]) << key << ", " << n << " ranks, step " << i + 1;
      EXPECT_EQ(a["comm_gathers_ahead"].get<int64_t>(), 0) << a.dump();
      EXPECT_EQ(a["comm_wait_s"].get<double>(), 0.0) << a.dump();
      ahead += b["comm_gathers_ahead"].get<int64_t>();
      moved += b["moved_h2d_bytes"].get<int64_t>();
      EXPECT_LE(b["device_peak_bytes"].get<int64_t>(), int64_t{3} << 20) << b.dump();
    }
    EXPECT_GT(ahead, 0) << n << " ranks: no gather went ahead";
    EXPECT_GT(moved, 0) << n << " ranks: the budget was meant to move chunks";
  }
}

// The other two gradient paths: gradient accumulation (separate fp32 gradient payloads, reduced
// per micro-batch onto the owner's running sum) in fp32, and bf16 with parameter/gradient reuse
// (gradients reduced in fp32, stored back in bf16).
TEST_F(DistTrainTest, AccumulationAndBf16TrackOneRank) {
  struct Case {
    const char* name;
    bool bf16;
    int64_t accumulation;
    double tolerance;  // relative, per step
  };
  for (const Case& c : {Case{"fp32 accumulation", false, 2, 1e-5}, Case{"bf16", true, 1, 2e-2}}) {
    std::map<int64_t, std::vector<json>> runs;
    for (int64_t n : {1, 2}) {
      json cfg = config(4 / n, 6);
      cfg["bf16"]["enabled"] = c.bf16;
      cfg["gradient_accumulation_steps"] = c.accumulation;
      cfg["gradient_clipping"] = 1.0;
      const std::string path = write_config(cfg);
      const std::string metrics = "m" + std::to_string(n) + ".jsonl";
      const auto r = train(path, {"--nproc", std::to_string(n), "--metrics", metrics});
      ASSERT_EQ(r.exit_code, 0) << c.name << "\n" << r;
      runs[n] = read_metrics(dir_.file(metrics));
      ASSERT_EQ(runs[n].size(), 6u) << c.name;
    }
    for (size_t i = 0; i < 6; ++i) {
      const double one = runs[1][i]["loss"].get<double>(), two = runs[2][i]["loss"].get<double>();
      EXPECT_NEAR(two, one, c.tolerance * one) << c.name << ", step " << i + 1;
    }
    // The loss falls: the reduced gradients drive a working update.
    EXPECT_LT(runs[2].back()["loss"].get<double>(), runs[2].front()["loss"].get<double>())
        << c.name;
  }
}

// Note [speculative adam] on two ranks: host Adam starts in the backward once a chunk's group is
// reduced, with clipping on (every step here, so every speculated chunk is redone or, cancelled
// before its update started, updated once after the norm; and never):
// the losses and gradient norms equal those of the same two ranks without the worker, bit for bit.
TEST_F(DistTrainTest, SpeculationOnTwoRanksChangesNoNumber) {
  for (double clip : {0.05, 1e9}) {
    std::map<bool, std::vector<json>> runs;
    for (bool speculate : {false, true}) {
      json cfg = config(2, 6);
      cfg["gradient_clipping"] = clip;
      // Host chunks to speculate: the embedding in an ordinary chunk, a margin of one chunk.
      cfg["use_cpu_embedding"] = false;
      cfg["engine"]["device_memory"] = "1900KB";
      cfg["engine"]["overlap_adam"] = speculate;
      cfg["engine"]["speculative_adam"] = speculate;
      const std::string path = write_config(cfg);
      const std::string metrics = std::string("spec") + (speculate ? "1" : "0") + ".jsonl";
      const auto r = train(path, {"--nproc", "2", "--metrics", metrics});
      ASSERT_EQ(r.exit_code, 0) << r;
      runs[speculate] = read_metrics(dir_.file(metrics));
      ASSERT_EQ(runs[speculate].size(), 6u);
      if (!speculate) continue;
      for (const std::string& file : {metrics, metrics + ".rank1"}) {
        int64_t speculated = 0, undone = 0;
        for (const json& m : read_metrics(dir_.file(file))) {
          speculated += m.value("adam_speculated_chunks", int64_t{0});
          undone += m.value("adam_rolled_back_chunks", int64_t{0}) +
                    m.value("adam_cancelled_chunks", int64_t{0});
        }
        EXPECT_GT(speculated, 0) << file << ", clip " << clip;
        EXPECT_EQ(undone, clip < 1 ? speculated : 0) << file << ", clip " << clip;
      }
    }
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(runs[true][i]["loss"], runs[false][i]["loss"])
          << "clip " << clip << ", step " << i + 1;
      EXPECT_EQ(runs[true][i]["grad_norm"], runs[false][i]["grad_norm"])
          << "clip " << clip << ", step " << i + 1;
    }
  }
}

// Records (data.jsonl) packed into windows, with answers of uneven length, so that the ranks'
// micro-batches count different numbers of targets: two ranks train what one does, the loss being
// the mean over the global batch's counted targets on both (Note [loss over counted targets]).
TEST_F(DistTrainTest, RecordsOnTwoRanksTrackOneRank) {
  fs::create_directories(dir_.path() / "conf" / "tok");
  write_text(dir_.file("conf/tok/tokenizer.json"), text::testing::small_tokenizer_json());
  write_text(dir_.file("conf/tok/tokenizer_config.json"), text::testing::small_tokenizer_config());
  std::string records;
  for (int i = 0; i < 30; ++i) {
    std::string answer = "Paris";
    for (int w = 0; w < (i * 5) % 23; ++w) answer += " is the capital";
    records += json{{"messages",
                     {{{"role", "user"}, {"content", "question " + std::to_string(i)}},
                      {{"role", "assistant"}, {"content", answer}}}}}
                   .dump() +
               "\n";
  }
  write_text(dir_.file("conf/conv.jsonl"), records);
  std::map<int64_t, std::vector<json>> runs;
  for (int64_t n : {1, 2}) {
    json cfg = config(4 / n, 5);
    cfg["model"] = {{"preset", "gpt-tiny"}, {"vocab_size", 304}, {"seq_len", 48}};
    cfg["data"] = {{"jsonl", "conv.jsonl"}, {"tokenizer", "tok"}};
    cfg["gradient_accumulation_steps"] = 2;
    cfg["engine"]["device_memory"] = "6MB";
    const std::string path = write_config(cfg);
    const std::string metrics = "records" + std::to_string(n) + ".jsonl";
    const auto r = train(path, {"--nproc", std::to_string(n), "--metrics", metrics});
    ASSERT_EQ(r.exit_code, 0) << r;
    runs[n] = read_metrics(dir_.file(metrics));
    ASSERT_EQ(runs[n].size(), 5u) << r;
    if (n == 2) {
      const auto other = read_metrics(dir_.file(metrics + ".rank1"));
      ASSERT_EQ(other.size(), 5u);
      for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(other[i]["counted_targets"], runs[2][i]["counted_targets"]) << "step " << i + 1;
    }
  }
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(runs[2][i]["counted_targets"], runs[1][i]["counted_targets"]) << "step " << i + 1;
    const double one = runs[1][i]["loss"].get<double>(), two = runs[2][i]["loss"].get<double>();
    EXPECT_NEAR(two, one, 1e-5 * one) << "step " << i + 1;
  }
}

// The Llama family on two ranks: llama-tiny (grouped-query attention, llama3 rope, untied head)
// tracks one rank's losses, as the GPT does above.
TEST_F(DistTrainTest, ALlamaOnTwoRanksTracksOneRank) {
  std::map<int64_t, std::vector<json>> runs;
  for (int64_t n : {1, 2}) {
    json cfg = config(4 / n, 5);
    cfg["model"] = {{"preset", "llama-tiny"}, {"seq_len", 32}};
    cfg["engine"]["device_memory"] = "4MB";
    const std::string path = write_config(cfg);
    const std::string metrics = "llama" + std::to_string(n) + ".jsonl";
    const auto r = train(path, {"--nproc", std::to_string(n), "--metrics", metrics});
    ASSERT_EQ(r.exit_code, 0) << r;
    runs[n] = read_metrics(dir_.file(metrics));
    ASSERT_EQ(runs[n].size(), 5u);
  }
  for (size_t i = 0; i < 5; ++i) {
    const double one = runs[1][i]["loss"].get<double>(), two = runs[2][i]["loss"].get<double>();
    EXPECT_NEAR(two, one, 1e-5 * one) << "step " << i + 1;
  }
  EXPECT_GT(runs[2].back()["gathers"].get<int64_t>(), 0);
}

// The NVMe tier on two ranks (engine.nvme_path): each rank keeps the optimizer payloads of the
// chunks it owns in a run directory of its own under one nvme_path, under its share of the host
// budget, and the losses are those of the same two ranks with everything in memory, bit for bit.
TEST_F(DistTrainTest, TwoRanksWithTheNvmeTierMatchTwoRanksInMemory) {
  // A deep, narrow bf16 GPT of 31 chunks of 20000 elements (16 per rank): 40000 B of compute
  // payloads and 240000 B of optimizer payloads (241664 in a 4 KiB-aligned staging buffer) each.
  json cfg = config(1, 5);
  cfg["model"] = {
      {"hidden", 64}, {"layers", 10}, {"heads", 4}, {"vocab_size", 256}, {"seq_len", 16}};
  cfg["bf16"]["enabled"] = true;
  cfg["use_cpu_embedding"] = false;
  cfg["engine"]["activation_checkpointing"] = true;
  cfg["engine"]["device_memory"] = "64MB";
  const auto probe = train(write_config(cfg, "probe.json"), {"--nproc", "2"});
  ASSERT_EQ(probe.exit_code, 0) << probe;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(probe.err, m, std::regex(R"(predicted non-model peak ([0-9.]+) KiB)")))
      << probe.err;
  const auto predicted = static_cast<int64_t>(std::stod(m[1]) * 1024);
  // The device holds twice the predicted non-model peak and 8 compute payloads: the working set
  // (two groups of two), not one whole chunk of 280000 B beside it.
  cfg["engine"]["device_memory"] = 2 * predicted + 8 * 40000;
  const std::string memory = write_config(cfg, "memory.json");
  const auto in_memory_run = train(memory, {"--nproc", "2", "--metrics", "memory.jsonl"});
  ASSERT_EQ(in_memory_run.exit_code, 0) << in_memory_run;
  // Each rank's half of the host holds its 16 compute payloads, its pool and one more payload.
  const int64_t per_rank = 16 * 40000 + 4 * 241664 + 40000;
  cfg["engine"]["host_memory"] = 2 * per_rank;
  cfg["engine"]["nvme_path"] = "nvme";
  fs::create_directories(dir_.path() / "nvme");
  const auto r = train(write_config(cfg, "nvme.json"), {"--nproc", "2", "--metrics", "nvme.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_NE(r.err.find("with their optimizer payloads on NVMe"), std::string::npos) << r.err;
  for (const std::string suffix : {"", ".rank1"}) {
    const auto in_memory = read_metrics(dir_.file("memory.jsonl" + suffix));
    const auto on_nvme = read_metrics(dir_.file("nvme.jsonl" + suffix));
    ASSERT_EQ(on_nvme.size(), in_memory.size());
    int64_t read = 0;
    for (size_t i = 0; i < on_nvme.size(); ++i) {
      EXPECT_EQ(on_nvme[i]["loss"].get<double>(), in_memory[i]["loss"].get<double>())
          << "rank file " << suffix << ", step " << i + 1;
      EXPECT_LE(on_nvme[i]["host_peak_bytes"].get<int64_t>(), per_rank) << on_nvme[i].dump();
      read += on_nvme[i]["nvme_read_bytes"].get<int64_t>();
    }
    EXPECT_GT(read, 0) << "rank file " << suffix;
  }
  EXPECT_TRUE(fs::is_empty(dir_.path() / "nvme")) << "a rank's NVMe directory was left behind";
}

// `pstar estimate` models ranks: its per-rank chunks are what each rank of a run holds.
TEST_F(DistTrainTest, EstimatePredictsEachRanksModelData) {
  for (int64_t n : {2, 4}) {
    const std::string cfg = write_config(config(4 / n, 2));
    const auto run = train(cfg, {"--nproc", std::to_string(n), "--metrics", "m.jsonl"});
    ASSERT_EQ(run.exit_code, 0) << run;
    const auto est = run_pstar({"estimate", "--config", cfg, "--gpu-mem", "80GB", "--cpu-mem",
                                "64GB", "--gpus-per-node", std::to_string(n), "--json"},
                               dir_.path());
    ASSERT_EQ(est.exit_code, 0) << est;
    const json chunks = json::parse(est.out)["chunks"];
    EXPECT_EQ(chunks["num_chunks"].get<int64_t>(), parse_chunk_plan(run.err).chunks);
    const int64_t predicted = chunks["per_rank"].get<int64_t>() *
                              chunks["chunk_size"].get<int64_t>() *
                              chunks["bytes_per_param"].get<int64_t>();
    for (int64_t rank = 0; rank < n; ++rank) {
      const auto lines = read_metrics(
          dir_.file(rank == 0 ? std::string("m.jsonl") : "m.jsonl.rank" + std::to_string(rank)));
      ASSERT_FALSE(lines.empty());
      EXPECT_EQ(lines.back()["model_data_bytes"].get<int64_t>(), predicted)
          << n << " ranks, rank " << rank;
    }
  }
}

TEST_F(DistTrainTest, ResumeWithTheSameRanksIsBitExact) {
  json c = config(2, 6);
  c["training"]["save_dir"] = "ckpt";
  c["training"]["save_interval"] = 3;
  const std::string cfg = write_config(c);
  const auto full = train(cfg, {"--nproc", "2", "--metrics", "full.jsonl", "--tensorboard", "tb"});
  ASSERT_EQ(full.exit_code, 0) << full;
  // One event file, rank 0's, with its metrics' loss at each step.
  std::vector<std::string> event_files;
  for (const auto& entry : fs::directory_iterator(dir_.file("tb")))
    event_files.push_back(entry.path().string());
  ASSERT_EQ(event_files.size(), 1u);
  const auto rank0 = read_metrics(dir_.file("full.jsonl"));
  std::vector<int64_t> steps;
  for (const auto& e : pstar::testing::read_events(event_files[0])) {
    if (e.scalars.empty()) continue;
    steps.push_back(e.step);
    const std::map<std::string, float> scalars(e.scalars.begin(), e.scalars.end());
    ASSERT_LE(e.step, static_cast<int64_t>(rank0.size()));
    EXPECT_EQ(scalars.at("train/loss"),
              static_cast<float>(rank0[static_cast<size_t>(e.step - 1)]["loss"].get<double>()));
    EXPECT_TRUE(scalars.count("comm/comm_bytes")) << "step " << e.step;
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const std::string step3 = "ckpt/step-00000003";
  for (const char* f : {"ckpt-0.pt", "ckpt-1.pt", "manifest.json", "config.json"})
    EXPECT_TRUE(fs::exists(dir_.path() / step3 / f)) << f;
  const json manifest = json::parse(read_text(dir_.file(step3 + "/manifest.json")));
  EXPECT_EQ(manifest["world_size"], 2);
  EXPECT_EQ(manifest["step"], 3);
  EXPECT_FALSE(manifest["run_id"].get<std::string>().empty());

  const auto resumed =
      train(cfg, {"--nproc", "2", "--metrics", "resumed.jsonl", "--resume", step3});
  ASSERT_EQ(resumed.exit_code, 0) << resumed;
  const auto a = read_metrics(dir_.file("full.jsonl"));
  const auto b = read_metrics(dir_.file("resumed.jsonl"));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b[i]["step"], a[i + 3]["step"]);
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i + 3]["loss"].get<double>()) << "step " << i + 4;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i + 3]["grad_norm"].get<double>());
  }
  // The run id carries over into the checkpoints of the continuation.
  const json later = json::parse(read_text(dir_.file("ckpt/step-00000006/manifest.json")));
  EXPECT_EQ(later["run_id"], manifest["run_id"]);

  // One rank resumes it too, resharded on the fly (MergeCkptTest.
  // ResumeOnAnotherNumberOfRanksReshardsLikeMergeCkpt checks the numbers), and saves step 6 again
  // into the same directory: as a checkpoint of one rank, without the 2-rank run's ckpt-1.pt.
  const auto one = train(cfg, {"--metrics", "x.jsonl", "--resume", step3});
  ASSERT_EQ(one.exit_code, 0) << one;
  EXPECT_TRUE(contains(one.err,
                       "resume: resharding ckpt/step-00000003 from the 2 rank(s) that "
                       "wrote it to this run's 1"))
      << one;
  const json resaved = json::parse(read_text(dir_.file("ckpt/step-00000006/manifest.json")));
  EXPECT_EQ(resaved["world_size"], 1);
  EXPECT_TRUE(fs::exists(dir_.path() / "ckpt/step-00000006/ckpt-0.pt"));
  EXPECT_FALSE(fs::exists(dir_.path() / "ckpt/step-00000006/ckpt-1.pt"));
}

// Note [split modules]: with 4000-element chunks gpt-tiny's embedding (16384 elements) is split
// over a group on several ranks. Under the tight budget chunks move every step and the losses are
// the bits of a budget that holds everything. Each rank saves its piece (Note [checkpoint
// pieces]); the same ranks resume bit-exactly, and four ranks resume it resharded, tracking the
// run.
TEST_F(DistTrainTest, SplitModulesResumeOnTheSameAndOnMoreRanks) {
  json c = config(2, 6);
  c["default_chunk_size"] = 4000;
  c["engine"]["device_memory"] = "2MB";  // 1 of each rank's 8 chunks stays on the device
  c["training"]["save_dir"] = "ckpt";
  c["training"]["save_interval"] = 3;
  const std::string cfg = write_config(c);
  const auto full = train(cfg, {"--nproc", "2", "--metrics", "full.jsonl"});
  ASSERT_EQ(full.exit_code, 0) << full;
  EXPECT_TRUE(contains(full.err, "are each split over a group of their own (2 parts")) << full;
  const auto roomy =
      train(cfg, {"--nproc", "2", "--metrics", "roomy.jsonl", "--set", "engine.device_memory=1GB",
                  "--set", "training.save_dir=ck-roomy"});
  ASSERT_EQ(roomy.exit_code, 0) << roomy;
  for (const std::string suffix : {"", ".rank1"}) {
    const auto tight = read_metrics(dir_.file("full.jsonl" + suffix));
    const auto whole = read_metrics(dir_.file("roomy.jsonl" + suffix));
    ASSERT_EQ(tight.size(), whole.size());
    for (size_t i = 0; i < tight.size(); ++i) {
      EXPECT_EQ(tight[i]["loss"].get<double>(), whole[i]["loss"].get<double>()) << i;
      EXPECT_GT(tight[i]["moved_h2d_bytes"].get<int64_t>(), 0) << suffix << ", step " << i + 1;
    }
    EXPECT_EQ(whole.back()["moved_h2d_bytes"].get<int64_t>(), 0) << suffix;
  }
  const std::string step3 = "ckpt/step-00000003";
  const auto same = train(cfg, {"--nproc", "2", "--metrics", "same.jsonl", "--resume", step3});
  ASSERT_EQ(same.exit_code, 0) << same;
  const auto four =
      train(cfg, {"--nproc", "4", "--metrics", "four.jsonl", "--resume", step3, "--set",
                  "train_micro_batch_size_per_gpu=1", "--set", "training.save_dir=ckpt4"});
  ASSERT_EQ(four.exit_code, 0) << four;
  EXPECT_TRUE(contains(four.err, "are each split over a group of their own (4 parts")) << four;
  const auto a = read_metrics(dir_.file("full.jsonl"));
  const auto b = read_metrics(dir_.file("same.jsonl"));
  const auto d = read_metrics(dir_.file("four.jsonl"));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  ASSERT_EQ(d.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const double want = a[i + 3]["loss"].get<double>();
    EXPECT_EQ(b[i]["loss"].get<double>(), want) << "step " << i + 4;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i + 3]["grad_norm"].get<double>());
    EXPECT_NEAR(d[i]["loss"].get<double>(), want, 1e-5 * std::abs(want)) << "step " << i + 4;
  }
}

// SIGTERM to the launcher: every rank finishes the same step, each writes its file, rank 0 the
// manifest, and the launcher exits 143; the same ranks continue bit-exactly.

}  // namespace
}  // namespace pstar::cmd
