// Writing and reading Hugging Face model folders: shards split as save_pretrained splits them, the
// index, atomic publication.
#include "pstar/formats/hf_folder.h"

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/formats/safetensors.h"
#include "test_util.h"

namespace pstar::formats {
namespace {

using pstar::testing::message_of;
using pstar::testing::ScratchDir;

// Tensors of 100, 60, 60 and 300 fp32 values, each filled with its index.
std::vector<HfFolderWriter::Tensor> tensors() {
  return {{"a", DType::kF32, {100}},
          {"b", DType::kF32, {60}},
          {"c", DType::kF32, {6, 10}},
          {"d", DType::kF32, {300}}};
}

void write_all(HfFolderWriter& w) {
  float i = 0;
  for (const auto& t : tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n), i++);
    w.write(t.name, values.data(), values.size() * sizeof(float));
  }
}

TEST(HfFolderWriterTest, ShardsFollowTheLimitInOrderWithAnIndex) {
  ScratchDir dir;
  const std::string out = dir.file("model");
  // 400 + 240 fit one 700-byte shard; 240 more would pass it; the 1200-byte tensor is alone.
  HfFolderWriter w(out, "{\"model_type\": \"llama\"}", tensors(), 700);
  EXPECT_EQ(w.num_shards(), 3u);
  write_all(w);
  EXPECT_FALSE(std::filesystem::exists(out)) << "visible before commit";
  w.commit();
  const HfFolder f = read_hf_folder(out);
  EXPECT_EQ(f.model_type, "llama");
  ASSERT_EQ(f.shards.size(), 3u);
  EXPECT_EQ(f.shard_of.at("a"), out + "/model-00001-of-00003.safetensors");
  EXPECT_EQ(f.shard_of.at("b"), out + "/model-00001-of-00003.safetensors");
  EXPECT_EQ(f.shard_of.at("c"), out + "/model-00002-of-00003.safetensors");
  EXPECT_EQ(f.shard_of.at("d"), out + "/model-00003-of-00003.safetensors");
  const auto index = nlohmann::json::parse(pstar::testing::read_text(f.index_path));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), (100 + 60 + 60 + 300) * 4u);
  SafetensorsReader c(f.shard_of.at("c"));
  const TensorInfo* info = c.find("c");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{6, 10}));
  float value = 0;
  std::memcpy(&value, c.data(*info) + 4 * 59, sizeof value);
  EXPECT_EQ(value, 2.0f);
}

TEST(HfFolderWriterTest, OneShardIsModelSafetensorsWithoutAnIndex) {
  ScratchDir dir;
  const std::string out = dir.file("model");
  std::filesystem::create_directory(out);  // an empty folder may be named
  HfFolderWriter w(out, "{\"model_type\": \"llama\"}", tensors());
  write_all(w);
  w.commit();
  const HfFolder f = read_hf_folder(out);
  EXPECT_TRUE(f.index_path.empty());
  ASSERT_EQ(f.shards.size(), 1u);
  EXPECT_EQ(f.shards[0], out + "/model.safetensors");
  EXPECT_EQ(SafetensorsReader(f.shards[0]).tensors().size(), 4u);
}

TEST(HfFolderWriterTest, NothingAppearsWithoutCommitAndExistingFoldersAreKept) {
  ScratchDir dir;
  const std::string out = dir.file("model");
  {
    HfFolderWriter w(out, "{}", tensors(), 700);
    std::vector<float> a(100, 0.f);
    w.write("a", a.data(), a.size() * sizeof(float));
    const std::string e = message_of<ConfigError>([&] { w.write("c", a.data(), 240); });
    EXPECT_NE(e.find("out of order; expected \"b\""), std::string::npos) << e;
  }  // destroyed half-way, as on an error
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "temporary files left behind";

  std::filesystem::create_directory(out);
  pstar::testing::write_text(out + "/keep.txt", "mine");
  const std::string e = message_of<ConfigError>([&] { HfFolderWriter(out, "{}", tensors()); });
  EXPECT_NE(e.find("already exists and is not an empty folder"), std::string::npos) << e;
  EXPECT_EQ(pstar::testing::read_text(out + "/keep.txt"), "mine");
}

}  // namespace
}  // namespace pstar::formats
