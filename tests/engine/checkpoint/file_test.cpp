// Checkpoint files whose pickle lies about its tensors: inputs found by tests/fuzz/checkpoint_fuzz,
// rebuilt here from a real checkpoint by editing its pickle and zipping it again with LibTorch's
// writer (so the zip itself stays valid).
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/checkpoint/store.h"
#include "test_util.h"

namespace pstar::checkpoint {
namespace {

using pstar::testing::message_of;

// Writes a checkpoint of one int64 tensor "x" = [0, 1, 2, 3] to `path`, with each `from` in its
// pickle replaced by the matching `to` (each must occur exactly once).
void write_edited_checkpoint(const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& edits) {
  write_checkpoint_file(path, {{"x", torch::arange(4, torch::kInt64)}});
  std::string pickle;
  std::vector<std::string> records;
  {
    caffe2::serialize::PyTorchStreamReader reader(path);
    const auto [data, size] = reader.getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), size);
    for (int i = 0; reader.hasRecord("data/" + std::to_string(i)); ++i) {
      const auto [record, record_size] = reader.getRecord("data/" + std::to_string(i));
      records.emplace_back(static_cast<const char*>(record.get()), record_size);
    }
  }
  for (const auto& [from, to] : edits) {
    const size_t at = pickle.find(from);
    ASSERT_NE(at, std::string::npos) << "the pickle has no " << ::testing::PrintToString(from);
    ASSERT_EQ(pickle.find(from, at + 1), std::string::npos) << "ambiguous edit";
    pickle.replace(at, from.size(), to);
  }
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (size_t i = 0; i < records.size(); ++i) {
    writer.writeRecord("data/" + std::to_string(i), records[i].data(), records[i].size());
  }
  writer.writeEndOfFile();
}

// Pickle protocol 2 spells the storage's numel (4) as BININT1 4 before the end of the persistent id
// tuple ("K\x04tQ"), and the tensor's size as the tuple "(K\x04t".
const std::string kNumel4 = std::string("K\x04tQ", 4);
const std::string kSize4 = std::string("(K\x04t", 4);

class CheckpointFileTest : public ::testing::Test {
 protected:
  pstar::testing::ScratchDir scratch_;
};

TEST_F(CheckpointFileTest, EditedPickleStillReads) {
  // The helper itself: with no edits the checkpoint reads back as written.
  const std::string path = scratch_.file("ok.pt");
  write_edited_checkpoint(path, {});
  const TensorMap tensors = read_checkpoint_file(path);
  ASSERT_EQ(tensors.count("x"), 1u);
  EXPECT_TRUE(tensors.at("x").equal(torch::arange(4, torch::kInt64)));
}

// LibTorch 1.13's unpickler sizes a storage from the numel the pickle claims, not from the record
// that holds its bytes: a tensor of 64 elements over a 32-byte record read 480 bytes past the
// buffer (found by tests/fuzz/checkpoint_fuzz).
TEST_F(CheckpointFileTest, StorageLargerThanItsRecordIsAFormatError) {
  const std::string path = scratch_.file("ckpt-0.pt");
  write_edited_checkpoint(path, {{kNumel4, std::string("K\x40tQ", 4)}, {kSize4, "(K\x40t"}});
  const std::string msg = message_of<FormatError>([&] { read_checkpoint_file(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("512-byte storage, but its record holds 32 bytes"), std::string::npos) << msg;
}

// The storage claims more than the record while the tensor stays inside the record.
TEST_F(CheckpointFileTest, StorageLargerThanItsRecordIsAFormatErrorEvenIfTheTensorFits) {
  const std::string path = scratch_.file("ckpt-0.pt");
  write_edited_checkpoint(path, {{kNumel4, std::string("K\x40tQ", 4)}});
  const std::string msg = message_of<FormatError>([&] { read_checkpoint_file(path); });
  EXPECT_NE(msg.find("512-byte storage, but its record holds 32 bytes"), std::string::npos) << msg;
}

// The storage matches its record, but the tensor's shape or offset reaches past it: the unpickler
// does not compare them either.
TEST_F(CheckpointFileTest, TensorReachingPastItsStorageIsAFormatError) {
  const std::string bigger = scratch_.file("bigger.pt");
  write_edited_checkpoint(bigger, {{kSize4, "(K\x40t"}});
  std::string msg = message_of<FormatError>([&] { read_checkpoint_file(bigger); });
  EXPECT_NE(msg.find("tensor 'x' (shape [64], strides [1], offset 0) reaches outside its 32-byte "
                     "storage"),
            std::string::npos)
      << msg;

  // The storage offset is "K\x00" right after the persistent id and its memo entry ("tQq\x06":
  // the seventh memoized object, the dict being untagged: Note [checkpoint pickle]).
  const std::string shifted = scratch_.file("shifted.pt");
  write_edited_checkpoint(shifted,
                          {{std::string("tQq\x06K\x00", 6), std::string("tQq\x06K\x02", 6)}});
  msg = message_of<FormatError>([&] { read_checkpoint_file(shifted); });
  EXPECT_NE(msg.find("offset 2) reaches outside its 32-byte storage"), std::string::npos) << msg;
}

}  // namespace
}  // namespace pstar::checkpoint
