// The checkpoint directory's bookkeeping: digests, integrity checks, retention, stale
// temporaries and --resume resolution, on hand-made directories.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "test_util.h"

namespace pstar::checkpoint {
namespace {

namespace fs = std::filesystem;

class CheckpointStoreTest : public ::testing::Test {
 protected:
  // A complete single-rank checkpoint of step `step` as the trainer writes it.
  std::string save(int64_t step, float value = 1.0f) {
    const std::string dir = checkpoint_dir(save_dir_, step);
    fs::create_directories(dir);
    const FileDigest d = write_checkpoint_file(
        checkpoint_file(dir, 0), {{"w", torch::full({64}, value)}, {"step", torch::tensor(step)}});
    write_manifest(dir, CheckpointManifest{1, step, "run", {d}});
    write_latest(save_dir_, dir);
    return dir;
  }

  pstar::testing::ScratchDir scratch_;
  std::string save_dir_ = scratch_.file("ck");
};

TEST(FileDigestTest, IsZlibsCrc32AndSizeOfTheBytesOnDisk) {
  pstar::testing::ScratchDir dir;
  // The CRC-32 check value of the ASCII digits "123456789" (the standard test vector).
  pstar::testing::write_text(dir.file("digits"), "123456789");
  const FileDigest d = file_digest(dir.file("digits"));
  EXPECT_EQ(d.bytes, 9);
  EXPECT_EQ(d.crc32, 0xCBF43926u);
  const FileDigest back = FileDigest::from_text(d.to_text());
  EXPECT_EQ(back.bytes, d.bytes);
  EXPECT_EQ(back.crc32, d.crc32);
  EXPECT_EQ(FileDigest::from_text("garbage").bytes, -1);
  EXPECT_THROW(file_digest(dir.file("absent")), IoError);
}

TEST_F(CheckpointStoreTest, WrittenDigestMatchesTheFileAndTheManifestKeepsIt) {
  const std::string dir = save(5);
  const CheckpointManifest m = read_manifest(dir);
  ASSERT_EQ(m.digests.size(), 1u);
  const FileDigest on_disk = file_digest(checkpoint_file(dir, 0));
  EXPECT_EQ(m.digests[0].bytes, on_disk.bytes);
  EXPECT_EQ(m.digests[0].crc32, on_disk.crc32);
  EXPECT_EQ(checkpoint_problem(dir), "");
}

TEST_F(CheckpointStoreTest, ProblemsNameTheFileAndWhatIsWrong) {
  const std::string dir = save(1);
  const std::string file = checkpoint_file(dir, 0);
  // One flipped byte in the middle: same size, other CRC.
  auto bytes = pstar::testing::read_bytes(file);
  bytes[bytes.size() / 2] ^= 0x40;
  pstar::testing::write_bytes(file, bytes);
  std::string problem = checkpoint_problem(dir);
  EXPECT_NE(problem.find(file), std::string::npos) << problem;
  EXPECT_NE(problem.find("CRC-32"), std::string::npos) << problem;
  // Truncated.
  bytes.resize(bytes.size() - 10);
  pstar::testing::write_bytes(file, bytes);
  problem = checkpoint_problem(dir);
  EXPECT_NE(problem.find("truncated"), std::string::npos) << problem;
  fs::remove(file);
  EXPECT_NE(checkpoint_problem(dir).find("is missing"), std::string::npos);
  // An interrupted save: files but no manifest.
  const std::string partial = save(2);
  fs::remove(fs::path(partial) / "manifest.json");
  EXPECT_NE(checkpoint_problem(partial).find("did not finish"), std::string::npos);
  // A malformed manifest.
  const std::string bad = save(3);
  pstar::testing::write_text((fs::path(bad) / "manifest.json").string(), "{\"world_size\": 1}");
  EXPECT_NE(checkpoint_problem(bad).find("manifest"), std::string::npos);
  // Numbers that are not integers in range (a float past int64 was undefined behaviour, found by
  // tests/fuzz/checkpoint_fuzz: corpus/checkpoint/manifest-float-number.json).
  for (const char* text :
       {R"({"world_size": 1e30, "step": 1, "run_id": "r"})",
        R"({"world_size": 1.5, "step": 1, "run_id": "r"})",
        R"({"world_size": 1, "step": 1, "run_id": "r", "bytes": [-1], "crc32": [0]})",
        R"({"world_size": 1, "step": 1, "run_id": "r", "bytes": [1], "crc32": [4294967296]})",
        R"({"world_size": 1, "step": 1, "run_id": "r", "bytes": 5, "crc32": 5})"}) {
    pstar::testing::write_text((fs::path(bad) / "manifest.json").string(), text);
    EXPECT_THROW(read_manifest(bad), FormatError) << text;
  }
}

// Note [held parameters]: the updates a parameter missed are 0 where the file says nothing (files
// from before the count existed), read where it does, and refused, naming the file and the tensor,
// where they are not an int64 scalar from 0 to the run's Adam steps.
TEST(AdamMissedTest, AbsentIsNoneAndABadCountNamesTheFileAndTheTensor) {
  TensorMap in;
  EXPECT_EQ(adam_missed(in, "w", 5, "ckpt-0.pt"), 0);
  in.emplace(adam_missed_of("w"), torch::tensor(int64_t{2}));
  EXPECT_EQ(adam_missed(in, "w", 5, "ckpt-0.pt"), 2);
  EXPECT_EQ(adam_missed(in, "v", 5, "ckpt-0.pt"), 0);
  for (const torch::Tensor& bad : {torch::tensor(int64_t{6}), torch::tensor(int64_t{-1}),
                                   torch::tensor(2.0f), torch::tensor({int64_t{1}})}) {
    in[adam_missed_of("w")] = bad;
    try {
      adam_missed(in, "w", 5, "ckpt-0.pt");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const FormatError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("ckpt-0.pt"), std::string::npos) << what;
      EXPECT_NE(what.find("__pstar__.adam_missed.w"), std::string::npos) << what;
    }
  }
}

TEST_F(CheckpointStoreTest, NewestIntactSkipsBrokenAndLaterOnes) {
  save(2);
  save(4);
  const std::string six = save(6);
  save(8);
  pstar::testing::write_text(checkpoint_file(six, 0), "not a checkpoint");
  EXPECT_EQ(newest_intact_checkpoint(save_dir_, 8), checkpoint_dir(save_dir_, 4));
  EXPECT_EQ(newest_intact_checkpoint(save_dir_, 100), checkpoint_dir(save_dir_, 8));
  EXPECT_EQ(newest_intact_checkpoint(save_dir_, 2), "");
}

TEST_F(CheckpointStoreTest, RetentionKeepsTheNewestCompleteOnes) {
  for (int64_t s : {1, 2, 3, 4, 5}) save(s);
  // Debris of an interrupted save before the newest, and a checkpoint of another timeline after.
  const std::string debris = checkpoint_dir(save_dir_, 3) + "x";  // not a step directory name
  fs::create_directories(debris);
  fs::remove(fs::path(checkpoint_dir(save_dir_, 4)) / "manifest.json");
  save(9);
  const auto removed = prune_checkpoints(save_dir_, 5, 2);
  EXPECT_EQ(removed.size(), 3u);  // 1 and 2 (complete, old), 4 (incomplete)
  std::vector<int64_t> left;
  for (const auto& e : list_checkpoints(save_dir_)) left.push_back(e.step);
  EXPECT_EQ(left, (std::vector<int64_t>{3, 5, 9}));
  EXPECT_TRUE(fs::exists(debris));
  // keep_last 0 keeps everything.
  EXPECT_TRUE(prune_checkpoints(save_dir_, 5, 0).empty());
  // The newest is kept even with keep_last 1.
  prune_checkpoints(save_dir_, 5, 1);
  left.clear();
  for (const auto& e : list_checkpoints(save_dir_)) left.push_back(e.step);
  EXPECT_EQ(left, (std::vector<int64_t>{5, 9}));
}

TEST_F(CheckpointStoreTest, StaleTemporariesOfOneFileAreRemoved) {
  const std::string dir = save(1);
  pstar::testing::write_text((fs::path(dir) / ".ckpt-0.pt.tmp.123.0").string(), "partial");
  pstar::testing::write_text((fs::path(dir) / ".ckpt-1.pt.tmp.456.0").string(), "other rank");
  remove_stale_temporaries(dir, "ckpt-0.pt");
  EXPECT_FALSE(fs::exists(fs::path(dir) / ".ckpt-0.pt.tmp.123.0"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / ".ckpt-1.pt.tmp.456.0"));
  EXPECT_TRUE(fs::exists(checkpoint_file(dir, 0)));
}

TEST_F(CheckpointStoreTest, ResumeTargetsAStepDirectoryOrWhatLatestNames) {
  const std::string two = save(2);
  save(4);
  const ResumeTarget direct = resolve_resume_dir(two);
  EXPECT_EQ(direct.dir, two);
  EXPECT_FALSE(direct.via_latest);
  const ResumeTarget latest = resolve_resume_dir(save_dir_);
  EXPECT_EQ(latest.dir, checkpoint_dir(save_dir_, 4));
  EXPECT_TRUE(latest.via_latest);
  EXPECT_THROW(resolve_resume_dir(scratch_.file("nowhere")), IoError);
}

}  // namespace
}  // namespace pstar::checkpoint
