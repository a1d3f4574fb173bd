// merge-ckpt -o DIR for the families whose checkpoints are not spelled as pstar's parameters: a
// Phi-3 folder gets its fused qkv_proj and gate_up_proj back, a Gemma 3 4B-27B folder its wrapped
// names, its config.json and the vision tower it was read with; each loads back into the model
// with the tensors the run saved.
#include <cstring>
#include <functional>

#include "engine/family_folders.h"
#include "merge_ckpt_fixture.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"

namespace pstar::cmd::merge_testing {
namespace {

class MergeFamiliesTest : public MergeCkptTest {
 protected:
  // Trains one step from the folder and merges; null when there is no Python to write folders.
  const pstar::testing::FamilyFolder* trained(const std::string& family,
                                              const std::string& variant = "") {
    const auto* f = pstar::testing::family_folder(family, variant);
    if (f == nullptr) return nullptr;
    const json c = {
        {"model", {{"init_from", f->dir}, {"seq_len", f->seq}}},
        {"data", {{"path", f->tokens}, {"sampling", "sequential"}}},
        {"train_micro_batch_size_per_gpu", f->batch},
        {"default_chunk_size", 4096},
        {"training", {{"steps", 1}, {"save_dir", "ck"}, {"save_interval", 1}}},
    };
    const auto r = train(write_config(c, family + ".json"), {});
    EXPECT_EQ(r.exit_code, 0) << r;
    const auto m = merge({"--dir", "ck/step-00000001", "-o", "out/merged"});
    EXPECT_EQ(m.exit_code, 0) << m;
    return f;
  }

  // The merged folder holds the tensors of the folder the run read (`f`), by name and shape;
  // those whose names `untrained` accepts byte for byte.
  void expect_same_tensors(const pstar::testing::FamilyFolder& f,
                           const std::function<bool(const std::string&)>& untrained) {
    const formats::SafetensorsReader merged(
        formats::read_hf_folder(dir_.file("out/merged")).shards.front());
    const formats::SafetensorsReader original(formats::read_hf_folder(f.dir).shards.front());
    ASSERT_EQ(merged.tensors().size(), original.tensors().size());
    for (const auto& t : original.tensors()) {
      const formats::TensorInfo* got = merged.find(t.name);
      ASSERT_NE(got, nullptr) << t.name;
      EXPECT_EQ(got->shape, t.shape) << t.name;
      if (!untrained(t.name)) continue;
      ASSERT_EQ(got->size_bytes, t.size_bytes) << t.name;
      EXPECT_EQ(std::memcmp(merged.data(*got), original.data(t), t.size_bytes), 0) << t.name;
    }
  }

  // The merged folder's tensors, read back into a model of its own config.json, against the
  // masters the checkpoint holds.
  void expect_loads_back() {
    config::ModelConfig m;
    m.init_from = dir_.file("out/merged");
    const model::ModelShape shape = model::resolve_model_shape(m);
    model::BuildOptions options;
    options.initialise = false;
    auto net = model::build_causal_lm(shape, options);
    model::load_pretrained(shape, m.init_from, *net);
    const auto masters = shard_parameters(dir_.path() / "ck/step-00000001", 1);
    auto params = net->named_parameters();
    ASSERT_EQ(params.size(), masters.size());
    for (const auto& [name, value] : masters) {
      ASSERT_NE(params.find(name), nullptr) << name;
      EXPECT_TRUE(bitwise_equal(params[name], value)) << name;
    }
  }
};

TEST_F(MergeFamiliesTest, Phi3ProjectionsAreFusedAgain) {
  const auto* f = trained("phi3");
  if (f == nullptr) GTEST_SKIP() << "no Python with torch (Debian: apt-get install python3-torch)";
  const formats::HfFolder folder = formats::read_hf_folder(dir_.file("out/merged"));
  EXPECT_EQ(folder.model_type, "phi3");
  const json config = json::parse(folder.config_text);
  EXPECT_EQ(config["architectures"][0], "Phi3ForCausalLM");
  // The same names and shapes as the folder the run read: qkv_proj and gate_up_proj, no q_proj.
  expect_same_tensors(*f, [](const std::string&) { return false; });
  expect_loads_back();
}

TEST_F(MergeFamiliesTest, AGemma3FolderIsWrittenBackWithItsVisionTower) {
  const auto* f = trained("gemma3_text", "wrapped");
  if (f == nullptr) GTEST_SKIP() << "no Python with torch (Debian: apt-get install python3-torch)";
  const formats::HfFolder folder = formats::read_hf_folder(dir_.file("out/merged"));
  EXPECT_EQ(folder.model_type, "gemma3");
  const json config = json::parse(folder.config_text);
  const json before = json::parse(read_text(f->dir + "/config.json"));
  EXPECT_EQ(config["vision_config"], before["vision_config"]);
  EXPECT_EQ(config["architectures"][0], "Gemma3ForConditionalGeneration");
  // What pstar does not train comes back byte for byte.
  expect_same_tensors(
      *f, [](const std::string& name) { return name.rfind("language_model.", 0) != 0; });
  expect_loads_back();
}

}  // namespace
}  // namespace pstar::cmd::merge_testing
