// Loading Hugging Face GPT-2 safetensors: the files are built here with HF's names and layout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/gpt.h"
#include "pstar/model/hf_gpt2.h"
#include "test_util.h"

namespace pstar::model {
namespace {

// Built with the counter-based init from `seed` (Note [counter-based init]).
BuildOptions seeded(uint64_t seed) {
  BuildOptions options;
  options.seed = seed;
  return options;
}

GptConfig tiny() {
  GptConfig c;
  c.hidden = 16;
  c.layers = 2;
  c.heads = 2;
  c.vocab_size = 20;
  c.seq_len = 8;
  return c;
}

void add_tensor(formats::SafetensorsWriter& w, const std::string& name, const torch::Tensor& t,
                formats::DType dtype) {
  auto c = t.contiguous();
  w.add(name, dtype, c.sizes().vec(), c.data_ptr(), static_cast<size_t>(c.nbytes()));
}

// Writes `source`'s parameters as HF does (optionally without the `transformer.` prefix), with
// HF's non-parameter attention buffers, in the given dtype.
void write_hf_file(Gpt& source, const std::string& path, bool with_prefix, formats::DType dtype,
                   const std::string& skip = "", const std::string& reshape = "") {
  formats::SafetensorsWriter w;
  const auto scalar = dtype == formats::DType::kF16    ? torch::kFloat16
                      : dtype == formats::DType::kBF16 ? torch::kBFloat16
                                                       : torch::kFloat32;
  for (const auto& item : source.named_parameters()) {
    std::string name = item.key();
    if (name == skip) continue;
    if (!with_prefix) name = name.substr(std::string("transformer.").size());
    auto t = item.value().detach().to(scalar);
    if (item.key() == reshape) t = t.t().contiguous();
    add_tensor(w, name, t, dtype);
  }
  const int64_t S = source.config().seq_len;
  for (int i = 0; i < source.config().layers; ++i) {
    const std::string p = std::string(with_prefix ? "transformer." : "") + "h." + std::to_string(i);
    add_tensor(w, p + ".attn.bias", torch::ones({1, 1, S, S}).tril(), formats::DType::kF32);
  }
  w.write(path);
}

TEST(HfGpt2Test, LoadsWithAndWithoutPrefixIgnoringBuffers) {
  pstar::testing::ScratchDir dir;
  Gpt source(tiny(), seeded(10));
  for (bool prefix : {false, true}) {
    const std::string path = dir.file(prefix ? "with.safetensors" : "without.safetensors");
    write_hf_file(source, path, prefix, formats::DType::kF32);
    Gpt target(tiny(), seeded(11));  // other values until the file's are loaded
    EXPECT_EQ(load_hf_gpt2_safetensors(target, path), 4 + 2 * 12);
    auto want = source.named_parameters();
    for (const auto& item : target.named_parameters())
      EXPECT_TRUE(torch::equal(item.value(), want[item.key()])) << item.key();
    auto ids = torch::randint(0, 20, {2, 8}, torch::kLong);
    EXPECT_TRUE(torch::equal(target.forward(ids), source.forward(ids)));
  }
}

TEST(HfGpt2Test, ConvertsHalfPrecisionFiles) {
  pstar::testing::ScratchDir dir;
  Gpt source(tiny(), seeded(12));
  for (auto dtype : {formats::DType::kF16, formats::DType::kBF16}) {
    write_hf_file(source, dir.file("half.safetensors"), false, dtype);
    Gpt target(tiny());
    load_hf_gpt2_safetensors(target, dir.file("half.safetensors"));
    const auto scalar = dtype == formats::DType::kF16 ? torch::kFloat16 : torch::kBFloat16;
    auto want = source.named_parameters();
    for (const auto& item : target.named_parameters())
      EXPECT_TRUE(torch::equal(item.value(), want[item.key()].to(scalar).to(torch::kFloat32)))
          << item.key();
  }
}

TEST(HfGpt2Test, MissingTensorIsNamed) {
  pstar::testing::ScratchDir dir;
  Gpt source(tiny());
  write_hf_file(source, dir.file("m.safetensors"), false, formats::DType::kF32,
                "transformer.h.1.mlp.c_fc.bias");
  Gpt target(tiny());
  try {
    load_hf_gpt2_safetensors(target, dir.file("m.safetensors"));
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("h.1.mlp.c_fc.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
  }
}

TEST(HfGpt2Test, MisshapedTensorIsNamed) {
  pstar::testing::ScratchDir dir;
  Gpt source(tiny());
  write_hf_file(source, dir.file("s.safetensors"), true, formats::DType::kF32, "",
                "transformer.h.0.attn.c_attn.weight");
  Gpt target(tiny());
  try {
    load_hf_gpt2_safetensors(target, dir.file("s.safetensors"));
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("h.0.attn.c_attn.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[48, 16]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[16, 48]"), std::string::npos) << msg;
  }
}

TEST(HfGpt2Test, WrongModelSizeIsAShapeError) {
  pstar::testing::ScratchDir dir;
  Gpt source(tiny());
  write_hf_file(source, dir.file("v.safetensors"), false, formats::DType::kF32);
  GptConfig bigger = tiny();
  bigger.vocab_size = 21;
  Gpt target(bigger);
  EXPECT_THROW(load_hf_gpt2_safetensors(target, dir.file("v.safetensors")), FormatError);
}

}  // namespace
}  // namespace pstar::model
