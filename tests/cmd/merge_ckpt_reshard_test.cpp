// `pstar merge-ckpt --reshard` and resuming on another number of ranks: checkpoints of
// `pstar train --nproc 2` continue on one rank, on four, and across chunk layouts.
#include "merge_ckpt_fixture.h"

namespace pstar::cmd {
namespace {

using namespace merge_testing;  // NOLINT(build/namespaces): the tests' shared fixture and helpers

// --reshard writes a checkpoint for another number of ranks that `pstar train --resume` takes:
// to the same number it continues bit-identically; 2 -> 1 and back 1 -> 2 resume and train.
TEST_F(MergeCkptTest, ReshardedCheckpointsResume) {
  train_two_ranks(6, "ck", "full.jsonl");
  const auto full = read_metrics(dir_.file("full.jsonl"));
  ASSERT_EQ(full.size(), 6u);
  const std::string cfg = "conf/ck.json";
  const json manifest = json::parse(read_text(dir_.file("ck/step-00000003/manifest.json")));

  auto resume = [&](const std::string& from, int nproc, const std::string& metrics) {
    return train(cfg, {"--nproc", std::to_string(nproc), "--resume", from, "--metrics", metrics,
                       "--set", "training.save_dir=ck-" + metrics});
  };
  auto expect_losses = [&](const std::string& metrics, const std::string& what) {
    const auto b = read_metrics(dir_.file(metrics));
    ASSERT_EQ(b.size(), 3u) << what;
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(b[i]["loss"].get<double>(), full[i + 3]["loss"].get<double>())
          << what << ", step " << i + 4;
  };

  // 2 -> 2: the same files in all but the writer; bit-identical.
  auto r = merge({"--dir", "ck/step-00000003", "--reshard", "2", "-o", "re2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  auto t = resume("re2", 2, "re2.jsonl");
  ASSERT_EQ(t.exit_code, 0) << t;
  expect_losses("re2.jsonl", "2 -> 2");

  // 2 -> 1.
  r = merge(
      {"--pattern", "ck/step-00000003/ckpt-*.pt", "--num", "2", "--reshard", "1", "-o", "re1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<std::string> files = entries("re1");
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"ckpt-0.pt", "config.json", "manifest.json"}));
  const json m1 = json::parse(read_text(dir_.file("re1/manifest.json")));
  EXPECT_EQ(m1["world_size"], 1);
  EXPECT_EQ(m1["step"], 3);
  EXPECT_EQ(m1["run_id"], manifest["run_id"]);
  EXPECT_EQ(manifest["pstar_version"], pstar::version());  // what pstar --version prints
  EXPECT_EQ(m1["pstar_version"], pstar::version());
  const checkpoint::TensorMap one = checkpoint::read_checkpoint_file(dir_.file("re1/ckpt-0.pt"));
  EXPECT_EQ(one.at("__pstar__.world_size").item<int64_t>(), 1);
  EXPECT_EQ(one.at("__pstar__.step").item<int64_t>(), 3);
  EXPECT_EQ(one.size(), 28u * 3 + 9);  // every parameter with its Adam state, and the run state
  t = resume("re1", 1, "re1.jsonl");
  ASSERT_EQ(t.exit_code, 0) << t;
  EXPECT_TRUE(contains(t.err, "resumed from re1/ckpt-0.pt at step 3")) << t;
  const auto single = read_metrics(dir_.file("re1.jsonl"));
  ASSERT_EQ(single.size(), 3u);
  for (const json& m : single) EXPECT_TRUE(std::isfinite(m["loss"].get<double>())) << m.dump();

  // 1 -> 2, from the one-rank checkpoint. pstar's GPT draws no random numbers while training, so
  // this too continues the original run exactly (Note [reshard] in checkpoint/reshard.cpp).
  r = merge({"--dir", "re1", "--reshard", "2", "-o", "re12"});
  ASSERT_EQ(r.exit_code, 0) << r;
  t = resume("re12", 2, "re12.jsonl");
  ASSERT_EQ(t.exit_code, 0) << t;
  expect_losses("re12.jsonl", "2 -> 1 -> 2");

  // More ranks than chunks: the same error the engine would give, and no directory.
  r = merge({"--dir", "ck/step-00000003", "--reshard", "8", "-o", "re8"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "fewer than the 8 ranks")) << r;
  EXPECT_FALSE(fs::exists(dir_.path() / "re8"));
  // An existing directory is not replaced.
  r = merge({"--dir", "ck/step-00000003", "--reshard", "1", "-o", "re1"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "already exists")) << r;
}

// Note [chunk sizes]: one rank lays gpt-tiny out with chunks of several sizes (modules larger than
// default_chunk_size in chunks of their own), two ranks with one raised size. Checkpoints hold
// named parameters, so either resumes on the other, directly and through merge-ckpt --reshard,
// continuing the run within the bound one and two ranks keep (Note [reshard]).
TEST_F(MergeCkptTest, CheckpointsMoveBetweenChunkLayouts) {
  json c = config(6, 3, "mx");
  c["default_chunk_size"] = 4000;
  c["engine"]["device_memory"] = "32MB";  // two ranks' raised chunks are large
  const std::string cfg = write_config(c, "mx.json");
  auto r = train(cfg, {"--nproc", "1", "--metrics", "one.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "get a chunk of their own")) << r;
  // The same global batch on two ranks: one sequence each.
  const std::string half = "train_micro_batch_size_per_gpu=1";
  r = train(cfg, {"--nproc", "2", "--metrics", "two.jsonl", "--set", "training.save_dir=mx2",
                  "--set", half});
  ASSERT_EQ(r.exit_code, 0) << r;
  // Note [split modules]: two ranks split the embedding over a group, each keeping a piece.
  EXPECT_TRUE(contains(r.err, "are each split over a group of their own")) << r;
  const auto one = read_metrics(dir_.file("one.jsonl"));
  const auto two = read_metrics(dir_.file("two.jsonl"));
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(two.size(), 6u);
  auto resume = [&](const std::string& from, int nproc, const std::string& metrics) {
    const auto t = train(cfg, {"--nproc", std::to_string(nproc), "--resume", from, "--metrics",
                               metrics, "--set", "training.save_dir=ck-" + metrics, "--set",
                               nproc == 2 ? half : "train_micro_batch_size_per_gpu=2"});
    EXPECT_EQ(t.exit_code, 0) << t;
    return read_metrics(dir_.file(metrics));
  };
  auto expect_near = [](const std::vector<json>& got, const std::vector<json>& full,
                        const std::string& what) {
    ASSERT_EQ(got.size(), 3u) << what;
    for (size_t i = 0; i < 3; ++i) {
      const double want = full[i + 3]["loss"].get<double>();
      EXPECT_NEAR(got[i]["loss"].get<double>(), want, 1e-5 * std::abs(want))
          << what << ", step " << i + 4;
    }
  };
  // One rank's several sizes -> two ranks, directly and through merge-ckpt: the same numbers.
  const auto direct = resume("mx/step-00000003", 2, "direct2.jsonl");
  r = merge({"--dir", "mx/step-00000003", "--reshard", "2", "-o", "re2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto merged = resume("re2", 2, "merged2.jsonl");
  expect_near(direct, one, "1 -> 2 directly");
  ASSERT_EQ(merged.size(), direct.size());
  for (size_t i = 0; i < direct.size(); ++i)
    EXPECT_EQ(merged[i]["loss"].get<double>(), direct[i]["loss"].get<double>()) << i;
  // Two ranks' pieces -> one rank's several sizes.
  expect_near(resume("mx2/step-00000003", 1, "back1.jsonl"), two, "2 -> 1");
  // The pieces merge into the parameters they are (Note [checkpoint pieces]): each one joined
  // by hand from the files, against merge-ckpt's safetensors and its reshard to one rank.
  const std::map<std::string, at::Tensor> pieces =
      shard_parameters(dir_.path() / "mx2/step-00000003", 2);
  EXPECT_TRUE(fs::exists(dir_.path() / "mx2/step-00000003/ckpt-1.pt"));
  r = merge({"--dir", "mx2/step-00000003", "-o", "out/mx2.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const formats::SafetensorsReader reader(dir_.file("out/mx2.safetensors"));
  ASSERT_EQ(reader.tensors().size(), pieces.size());
  for (const auto& [name, want] : pieces) {
    const formats::TensorInfo* info = reader.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader, *info), want)) << name;
  }
  r = merge({"--dir", "mx2/step-00000003", "--reshard", "1", "-o", "re1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::map<std::string, at::Tensor> one_file = shard_parameters(dir_.path() / "re1", 1);
  ASSERT_EQ(one_file.size(), pieces.size());
  for (const auto& [name, want] : pieces)
    EXPECT_TRUE(bitwise_equal(one_file.at(name), want)) << name;
}

// Note [resume resharding]: a 2-rank checkpoint resumes with --nproc 1 and --nproc 4, resharded
// on the fly, and continues exactly as a resume from `merge-ckpt --reshard` of it does; the log
// says it resharded.
TEST_F(MergeCkptTest, ResumeOnAnotherNumberOfRanksReshardsLikeMergeCkpt) {
  train_two_ranks(6, "ck", "full.jsonl");
  const std::string cfg = "conf/ck.json";
  auto resume = [&](const std::string& from, int nproc, const std::string& metrics) {
    return train(cfg, {"--nproc", std::to_string(nproc), "--resume", from, "--metrics", metrics,
                       "--set", "training.save_dir=ck-" + metrics});
  };
  for (const int nproc : {1, 4}) {
    SCOPED_TRACE("--nproc " + std::to_string(nproc));
    const std::string n = std::to_string(nproc);
    auto r = merge({"--dir", "ck/step-00000003", "--reshard", n, "-o", "re" + n});
    ASSERT_EQ(r.exit_code, 0) << r;
    auto t = resume("re" + n, nproc, "merged" + n + ".jsonl");
    ASSERT_EQ(t.exit_code, 0) << t;
    EXPECT_FALSE(contains(t.err, "resharding")) << t;
    t = resume("ck/step-00000003", nproc, "direct" + n + ".jsonl");
    ASSERT_EQ(t.exit_code, 0) << t;
    EXPECT_TRUE(contains(t.err,
                         "resume: resharding ck/step-00000003 from the 2 rank(s) that "
                         "wrote it to this run's " +
                             n))
        << t;
    EXPECT_TRUE(contains(t.err, "at step 3")) << t;
    const auto merged = read_metrics(dir_.file("merged" + n + ".jsonl"));
    const auto direct = read_metrics(dir_.file("direct" + n + ".jsonl"));
    ASSERT_EQ(merged.size(), 3u);
    ASSERT_EQ(direct.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(direct[i]["step"], merged[i]["step"]);
      EXPECT_EQ(direct[i]["loss"].get<double>(), merged[i]["loss"].get<double>())
          << "step " << direct[i]["step"];
    }
    // The new run's own checkpoint is one of the new number of ranks.
    const json m =
        json::parse(read_text(dir_.file("ck-direct" + n + ".jsonl/step-00000006/manifest.json")));
    EXPECT_EQ(m["world_size"], nproc);
  }
  // A damaged old file is named before anything is loaded, by whichever rank checked it.
  std::string bytes = read_text(dir_.file("ck/step-00000003/ckpt-1.pt"));
  bytes[bytes.size() / 2] ^= 0x20;
  write_text(dir_.file("ck/step-00000003/ckpt-1.pt"), bytes);
  const auto t = resume("ck/step-00000003", 1, "bad.jsonl");
  EXPECT_EQ(t.exit_code, 4) << t;
  EXPECT_TRUE(contains(t.err, "ck/step-00000003/ckpt-1.pt: CRC-32 is")) << t;
}

}  // namespace
}  // namespace pstar::cmd
