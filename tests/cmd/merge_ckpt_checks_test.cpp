// What `pstar merge-ckpt` refuses and what it holds: sets of files that are not one checkpoint,
// shards that fail their manifest's checks, and the memory a streaming merge needs.
#include <sys/resource.h>
#include <sys/wait.h>

#include "merge_ckpt_fixture.h"

namespace pstar::cmd {
namespace {

using namespace merge_testing;  // NOLINT(build/namespaces): the tests' shared fixture and helpers

// Runs pstar and reports its own peak resident memory (wait4's rusage of that one child).
struct Measured {
  RunResult result;
  int64_t max_rss_bytes = 0;
};
Measured run_measured(const std::vector<std::string>& args, const fs::path& cwd) {
  Measured m;
  Spawned child = spawn_pstar(args, cwd);
  int status = 0;
  rusage usage{};
  pid_t done;
  do {
    done = wait4(child.pid, &status, 0, &usage);
  } while (done < 0 && errno == EINTR);
  EXPECT_EQ(done, child.pid) << std::strerror(errno);
  child.pid = -1;
  m.result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.result.out = read_all(child.out.get());
  m.result.err = read_all(child.err.get());
  m.max_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
  return m;
}

// Sets of files that are not one checkpoint: each a clear error naming the file, with the exit
// code of its kind (docs/cli.md), and nothing written.
TEST_F(MergeCkptTest, BadFileSetsAreClearErrorsAndWriteNothing) {
  train_two_ranks(6, "a", "a.jsonl");
  train_two_ranks(3, "b", "b.jsonl");
  const fs::path a3 = dir_.path() / "a/step-00000003";
  const fs::path a6 = dir_.path() / "a/step-00000006";
  const fs::path b3 = dir_.path() / "b/step-00000003";
  auto make = [&](const std::string& name,
                  const std::vector<std::pair<fs::path, std::string>>& files) {
    fs::create_directories(dir_.path() / "bad" / name);
    for (const auto& [from, to] : files)
      fs::copy_file(from, dir_.path() / "bad" / name / to, fs::copy_options::overwrite_existing);
  };
  struct Case {
    std::string label;
    std::vector<std::string> args;
    int exit_code;
    std::vector<std::string> message;
  };
  make("missing", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  make("dup", {{a3 / "ckpt-0.pt", "first.pt"}, {a3 / "ckpt-0.pt", "second.pt"}});
  make("runs/x", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  make("runs/y", {{b3 / "ckpt-1.pt", "ckpt-1.pt"}, {b3 / "manifest.json", "manifest.json"}});
  make("steps", {{a3 / "ckpt-0.pt", "ckpt-0.pt"},
                 {a6 / "ckpt-1.pt", "ckpt-1.pt"},
                 {a3 / "manifest.json", "manifest.json"}});
  make("steps-unverified", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a6 / "ckpt-1.pt", "ckpt-1.pt"}});
  make("corrupt", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  const std::string whole = read_text((a3 / "ckpt-1.pt").string());
  write_text(dir_.file("bad/corrupt/ckpt-1.pt"), whole.substr(0, whole.size() / 2));
  make("corrupt-unverified", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}});
  write_text(dir_.file("bad/corrupt-unverified/ckpt-1.pt"), whole.substr(0, whole.size() / 2));
  make("newer", {{a3 / "ckpt-0.pt", "ckpt-0.pt"}, {a3 / "manifest.json", "manifest.json"}});
  {
    // A file of a newer format that its manifest vouches for: the format check, not the
    // checksum, refuses it.
    checkpoint::TensorMap t = checkpoint::read_checkpoint_file((a3 / "ckpt-1.pt").string());
    t["__pstar__.format_version"] = torch::tensor(int64_t{2});
    checkpoint::CheckpointManifest m = checkpoint::read_manifest(dir_.file("bad/newer"));
    m.digests[1] = checkpoint::write_checkpoint_file(dir_.file("bad/newer/ckpt-1.pt"),
                                                     checkpoint::TensorList(t.begin(), t.end()));
    checkpoint::write_manifest(dir_.file("bad/newer"), m);
  }

  const std::vector<Case> cases = {
      {"missing rank",
       {"--pattern", "bad/missing/ckpt-*.pt", "--num", "2"},
       2,
       {"--num 2 but 1 checkpoint file(s) matched", "bad/missing/ckpt-0.pt", "missing: ckpt-1.pt"}},
      {"duplicated rank",
       {"--pattern", "bad/dup/*.pt", "--num", "2", "--unverified"},
       4,
       {"bad/dup/second.pt and bad/dup/first.pt both hold rank 0"}},
      {"two runs",
       {"--pattern", "bad/runs/*/ckpt-*.pt", "--num", "2"},
       4,
       {"bad/runs/y/manifest.json describes run", "bad/runs/x/manifest.json",
        "all files must come from one checkpoint"}},
      {"two steps (the manifest's checksum)",
       {"--dir", "bad/steps"},
       4,
       {"bad/steps/ckpt-1.pt", "but bad/steps/manifest.json records", "nothing was merged"}},
      {"two steps (unverified, the step)",
       {"--pattern", "bad/steps-unverified/ckpt-*.pt", "--num", "2", "--unverified"},
       4,
       {"bad/steps-unverified/ckpt-1.pt: at step 6 but bad/steps-unverified/ckpt-0.pt is at "
        "step 3"}},
      {"--num above",
       {"--pattern", "a/step-00000003/ckpt-*.pt", "--num", "3"},
       2,
       {"--num 3 but 2 checkpoint file(s) matched", "missing: ckpt-2.pt"}},
      {"--num below",
       {"--pattern", "a/step-00000003/ckpt-0.pt", "--num", "1"},
       2,
       {"a/step-00000003/manifest.json: the checkpoint was written by 2 rank(s), but --num is 1"}},
      {"truncated file",
       {"--dir", "bad/corrupt"},
       4,
       {"bad/corrupt/ckpt-1.pt has", "bytes but bad/corrupt/manifest.json records",
        "(truncated, or not the file this checkpoint wrote)"}},
      {"truncated file, unverified",
       {"--pattern", "bad/corrupt-unverified/ckpt-*.pt", "--num", "2", "--unverified"},
       4,
       {"bad/corrupt-unverified/ckpt-1.pt: not a readable checkpoint (truncated or corrupt"}},
      {"newer format",
       {"--dir", "bad/newer"},
       4,
       {"bad/newer/ckpt-1.pt: checkpoint format version 2 is not supported by this pstar "
        "(expected 1)"}},
      {"no files", {"--pattern", "nowhere/ckpt-*.pt", "--num", "2"}, 3, {"matches no file"}},
  };
  for (const Case& c : cases) {
    for (const std::string output : {"out/model.safetensors", "out/model.pt"}) {
      std::vector<std::string> args = c.args;
      args.insert(args.end(), {"-o", output});
      const auto r = merge(args);
      EXPECT_EQ(r.exit_code, c.exit_code) << c.label << "\n" << r;
      for (const auto& part : c.message) EXPECT_TRUE(contains(r.err, part)) << c.label << "\n" << r;
      EXPECT_TRUE(entries("out").empty()) << c.label << ": something was written";
    }
  }

  // An output kind pstar does not write, and an output beside the checkpoint's own config.json.
  auto r = merge({"--dir", "a/step-00000003", "-o", "out/model.bin"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "-o out/model.bin: unknown output kind '.bin'")) << r;
  r = merge({"--dir", "a/step-00000003", "-o", "a/step-00000003/model.safetensors"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "would replace the checkpoint's own")) << r;
  EXPECT_FALSE(fs::exists(a3 / "model.safetensors"));
  EXPECT_TRUE(entries("out").empty());
}

// Note [merge checks]: every shard is checked against the size and CRC-32 that the checkpoint's
// manifest.json records before it is read. Bytes flipped inside a tensor's data leave the archive
// readable (the reader alone would merge them into the model); a truncated shard and one from
// another step are refused the same way; each names the shard and writes nothing, --unverified
// or not. A set without a manifest is refused unless --unverified.
TEST_F(MergeCkptTest, ShardsThatFailTheirManifestChecksumAreRefusedAndNothingIsWritten) {
  train_two_ranks(6, "ck", "full.jsonl");
  const fs::path a3 = dir_.path() / "ck/step-00000003";
  const fs::path a6 = dir_.path() / "ck/step-00000006";
  auto copy_step = [&](const std::string& name) {
    const fs::path to = dir_.path() / "bad" / name;
    fs::create_directories(to);
    for (const char* f : {"ckpt-0.pt", "ckpt-1.pt", "manifest.json", "config.json"})
      fs::copy_file(a3 / f, to / f);
    return to;
  };

  // Flipped bytes in the middle of the largest tensor of rank 1's file: find its data in the
  // archive (stored uncompressed) and invert 8 bytes of it.
  const fs::path flipped = copy_step("flipped");
  {
    const checkpoint::TensorMap t =
        checkpoint::read_checkpoint_file((flipped / "ckpt-1.pt").string());
    std::string largest;
    for (const auto& [name, tensor] : t)
      if (largest.empty() || tensor.nbytes() > t.at(largest).nbytes()) largest = name;
    const at::Tensor& victim = t.at(largest);
    ASSERT_GT(victim.nbytes(), 64u);
    std::string bytes = read_text((flipped / "ckpt-1.pt").string());
    const std::string data(static_cast<const char*>(victim.data_ptr()), victim.nbytes());
    const size_t at = bytes.find(data);
    ASSERT_NE(at, std::string::npos) << "tensor data of " << largest << " not found in the file";
    for (size_t i = 0; i < 8; ++i) bytes[at + victim.nbytes() / 2 + i] ^= '\xff';
    write_text((flipped / "ckpt-1.pt").string(), bytes);
    // The archive is still readable and the tensor now differs: only the checksum can tell.
    const checkpoint::TensorMap damaged =
        checkpoint::read_checkpoint_file((flipped / "ckpt-1.pt").string());
    EXPECT_FALSE(bitwise_equal(damaged.at(largest), victim)) << largest;
  }
  const fs::path truncated = copy_step("truncated");
  {
    const std::string bytes = read_text((truncated / "ckpt-1.pt").string());
    write_text((truncated / "ckpt-1.pt").string(), bytes.substr(0, bytes.size() - 100));
  }
  const fs::path other_step = copy_step("other-step");
  fs::copy_file(a6 / "ckpt-1.pt", other_step / "ckpt-1.pt", fs::copy_options::overwrite_existing);

  const json manifest = json::parse(read_text((a3 / "manifest.json").string()));
  char want[16];
  std::snprintf(want, sizeof want, "0x%08x", manifest["crc32"][1].get<uint32_t>());
  const checkpoint::FileDigest found_flipped =
      checkpoint::file_digest((flipped / "ckpt-1.pt").string());
  char found[16];
  std::snprintf(found, sizeof found, "0x%08x", found_flipped.crc32);
  struct Case {
    std::string dir;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"bad/flipped",
       {"bad/flipped/ckpt-1.pt: CRC-32 is " + std::string(found) +
            " but bad/flipped/manifest.json records " + want,
        "(the file is corrupt, or not the one this checkpoint wrote); nothing was merged"}},
      {"bad/truncated",
       {"bad/truncated/ckpt-1.pt has", "bytes but bad/truncated/manifest.json records"}},
      {"bad/other-step", {"bad/other-step/ckpt-1.pt", "but bad/other-step/manifest.json records"}},
  };
  for (const Case& c : cases) {
    for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
             {"-o", "out/model.safetensors"}, {"-o", "out/model.pt", "--unverified"}}) {
      std::vector<std::string> args{"--dir", c.dir};
      args.insert(args.end(), extra.begin(), extra.end());
      const auto r = merge(args);
      EXPECT_EQ(r.exit_code, 4) << c.dir << "\n" << r;
      for (const auto& part : c.message) EXPECT_TRUE(contains(r.err, part)) << c.dir << "\n" << r;
      EXPECT_TRUE(r.out.empty()) << r;
      EXPECT_TRUE(entries("out").empty()) << c.dir << ": something was written";
    }
    // Nor beside the files, without -o.
    const auto r = merge({"--pattern", c.dir + "/ckpt-*.pt", "--num", "2"});
    EXPECT_EQ(r.exit_code, 4) << r;
    EXPECT_FALSE(fs::exists(dir_.path() / c.dir / "ckpt-merged.pt")) << c.dir;
  }

  // No manifest: said so, with the flag that merges anyway.
  const fs::path bare = dir_.path() / "bare";
  fs::create_directories(bare);
  for (const char* f : {"ckpt-0.pt", "ckpt-1.pt"}) fs::copy_file(a3 / f, bare / f);
  auto r = merge({"--pattern", "bare/ckpt-*.pt", "--num", "2", "-o", "out/model.safetensors"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "no manifest.json vouches for bare/ckpt-0.pt")) << r;
  EXPECT_TRUE(contains(r.err, "bare/manifest.json is missing")) << r;
  EXPECT_TRUE(contains(r.err, "give --unverified to merge them unchecked")) << r;
  EXPECT_TRUE(entries("out").empty());
  r = merge(
      {"--pattern", "bare/ckpt-*.pt", "--num", "2", "-o", "out/model.safetensors", "--unverified"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "warning: merge-ckpt: 2 file(s) merged without a checksum")) << r;
  // The same model as the verified merge of the intact checkpoint.
  formats::SafetensorsReader reader(dir_.file("out/model.safetensors"));
  for (const auto& [name, master] : shard_parameters(a3, 2))
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader, *reader.find(name)), master)) << name;
}

// Note [merge passes]: merging into safetensors holds one file's tensors at a time, not the
// model. Eight ranks' files of a 25M-parameter GPT (100 MB of fp32 parameters, 300 MB with Adam
// state) written here through the engine's checkpoint writer; pstar's own peak resident memory
// (wait4) is compared with that of merging a tiny checkpoint, which costs the same start-up.
TEST_F(MergeCkptTest, StreamingMergeHoldsOneFileNotTheModel) {
  constexpr int64_t kRanks = 8;
  // Writes a synthetic checkpoint of `ranks` files for a GPT shape, distributed as the chunk
  // engine would; returns the largest file's tensor bytes and the parameters' bytes.
  auto write_checkpoint = [&](const std::string& sub, const json& model, int64_t ranks) {
    const fs::path step = dir_.path() / sub;
    fs::create_directories(step);
    const json cfg = {{"model", model},
                      {"data", {{"text", dir_.file("conf/corpus.txt")}}},
                      {"default_chunk_size", 1 << 20},
                      // A run's config.json holds the decided value (Note [cpu embedding]).
                      {"use_cpu_embedding", true}};
    write_text((step / "config.json").string(), cfg.dump(2));
    const plan::ModelChunkMap map =
        plan::model_chunk_map(config::load_train_config((step / "config.json").string()), ranks);
    int64_t largest = 0, params = 0;
    std::vector<checkpoint::FileDigest> digests;
    torch::manual_seed(7);
    for (int64_t r = 0; r < ranks; ++r) {
      checkpoint::TensorList tensors;
      int64_t bytes = 0;
      for (size_t i = 0; i < map.params.size(); ++i) {
        if (map.chunks[i] % ranks != r) continue;
        const auto& p = map.params[i];
        for (const std::string suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
          tensors.emplace_back(p.name + suffix, torch::randn(p.shape));
          bytes += tensors.back().second.nbytes();
        }
        params += tensors[tensors.size() - 3].second.nbytes();
      }
      for (const char* name : {"format_version", "step", "tokens", "skipped_steps", "adam_step",
                               "rank", "world_size"}) {
        const int64_t value = std::string(name) == "rank"         ? r
                              : std::string(name) == "world_size" ? ranks
                                                                  : 1;
        tensors.emplace_back(std::string("__pstar__.") + name, torch::tensor(value));
      }
      tensors.emplace_back("__pstar__.loss_scaler", torch::ones({3}, torch::kFloat64));
      tensors.emplace_back("__pstar__.rng", at::detail::getDefaultCPUGenerator().get_state());
      digests.push_back(
          checkpoint::write_checkpoint_file(checkpoint::checkpoint_file(step, r), tensors));
      largest = std::max(largest, bytes);
    }
    checkpoint::write_manifest(step.string(),
                               checkpoint::CheckpointManifest{ranks, 1, "synthetic", digests});
    return std::make_pair(largest, params);
  };
  write_checkpoint(
      "tiny", {{"hidden", 64}, {"layers", 1}, {"heads", 4}, {"vocab_size", 256}, {"seq_len", 64}},
      kRanks);
  const auto [largest, model_bytes] = write_checkpoint(
      "big", {{"hidden", 512}, {"layers", 8}, {"heads", 8}, {"vocab_size", 256}, {"seq_len", 64}},
      kRanks);
  ASSERT_GT(model_bytes, 100'000'000);
  ASSERT_LT(largest, model_bytes / 2);
  fs::create_directories(dir_.path() / "out-tiny");

  const Measured base = run_measured(
      {"merge-ckpt", "--dir", "tiny", "-o", "out-tiny/model.safetensors"}, dir_.path());
  ASSERT_EQ(base.result.exit_code, 0) << base.result;
  const Measured big =
      run_measured({"merge-ckpt", "--dir", "big", "-o", "out/model.safetensors"}, dir_.path());
  ASSERT_EQ(big.result.exit_code, 0) << big.result;
  // The parameters and a header of a few KiB.
  const auto file_bytes = static_cast<int64_t>(fs::file_size(dir_.file("out/model.safetensors")));
  EXPECT_GT(file_bytes, model_bytes);
  EXPECT_LT(file_bytes, model_bytes + (int64_t{1} << 20));

  const int64_t grown = big.max_rss_bytes - base.max_rss_bytes;
  std::printf(
      "[ merge    ] model %.1f MB fp32 parameters (%.1f MB with Adam state) in %lld files, "
      "largest file %.1f MB; peak RSS %.1f MB vs %.1f MB for a tiny checkpoint: +%.1f MB\n",
      model_bytes / 1e6, 3 * model_bytes / 1e6, static_cast<long long>(kRanks), largest / 1e6,
      big.max_rss_bytes / 1e6, base.max_rss_bytes / 1e6, grown / 1e6);
  // One file's tensors (parameters and Adam state, as read) plus allocator slack; the whole model
  // (parameters alone) would be over twice the largest file.
  EXPECT_LT(grown, largest * 3 / 2)
      << "largest file " << largest << " bytes, model " << model_bytes;
  EXPECT_LT(grown, model_bytes * 3 / 4);
  // pstar's own accounting says the same.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(big.result.err, m, std::regex(R"(held at most ([0-9.]+) MiB)")))
      << big.result;
  EXPECT_NEAR(std::stod(m[1]) * 1048576.0, static_cast<double>(largest), 0.01 * largest);

  // And the merge is right: spot-check a tensor from the last rank against its file.
  formats::SafetensorsReader reader(dir_.file("out/model.safetensors"));
  EXPECT_EQ(reader.tensors().size(), 2 + 8 * 12 + 2u);
  const checkpoint::TensorMap last = checkpoint::read_checkpoint_file(
      checkpoint::checkpoint_file(dir_.path() / "big", kRanks - 1));
  for (const auto& [name, t] : last) {
    if (!is_parameter_name(last, name)) continue;
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader, *reader.find(name)), t)) << name;
  }
}

}  // namespace
}  // namespace pstar::cmd
