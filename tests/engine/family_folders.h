// The tiny Hugging Face folders of tests/reference/decoder_reference.py, one per family (and
// variant), written once per test process, with the float64 losses that script computes for them:
// the reference every family's tests compare pstar with.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pstar/formats/config.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::testing {

struct FamilyFolder {
  std::string family, variant;
  std::string dir;                 // config.json and model.safetensors
  std::string tokens;              // tokens.bin: uint16 ids
  std::vector<double> losses;      // each step's float64 loss, AdamW between
  std::vector<double> aux_losses;  // a mixture of experts': each step's load-balancing loss
  int64_t batch = 0, seq = 0;
  double lr = 0, weight_decay = 0;
};

// The folder of `family` ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3", "mixtral",
// "qwen3_moe") and `variant` ("", "rope_parameters", "wrapped", "wrapped_v5", "aux",
// "fused_experts"), written on first use; null when no
// Python with torch can write it (the caller skips, naming the package). Failing to write it with
// one is a test failure.
inline const FamilyFolder* family_folder(const std::string& family,
                                         const std::string& variant = "") {
  static ScratchDir* root = new ScratchDir();  // for the process: the folders outlive the tests
  static std::map<std::string, std::unique_ptr<FamilyFolder>> made;
  static const std::string python = python_with_torch();
  if (python.empty()) return nullptr;
  const std::string key = family + (variant.empty() ? "" : "-" + variant);
  auto& slot = made[key];
  if (slot) return slot.get();
  auto f = std::make_unique<FamilyFolder>();
  f->family = family;
  f->variant = variant;
  f->dir = root->file(key);
  const std::string command =
      python + " " + PSTAR_SOURCE_DIR + "/tests/reference/decoder_reference.py --family " + family +
      (variant.empty() ? "" : " --variant " + variant) + " --out " + f->dir + " >/dev/null";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "failed: " << command;
    return nullptr;
  }
  const auto j = nlohmann::json::parse(read_text(f->dir + "/reference.json"));
  f->tokens = f->dir + "/tokens.bin";
  f->losses = j.at("losses").get<std::vector<double>>();
  if (j.contains("aux_losses")) f->aux_losses = j.at("aux_losses").get<std::vector<double>>();
  f->batch = j.at("batch").get<int64_t>();
  f->seq = j.at("seq").get<int64_t>();
  f->lr = j.at("lr").get<double>();
  f->weight_decay = j.at("weight_decay").get<double>();
  slot = std::move(f);
  return slot.get();
}

// The generation reference of a family's folder (decoder_reference.py --generate): prompts of
// different lengths, and for each prompt alone its greedy continuation and one of random tokens,
// with the float64 logits of every step.
struct GenerationReference {
  struct Continuation {
    std::vector<std::vector<int64_t>> tokens;              // [prompt][step]
    std::vector<std::vector<std::vector<double>>> logits;  // [prompt][step][vocab]
  };
  std::string dir;  // config.json and model.safetensors
  std::vector<std::vector<int64_t>> prompts;
  Continuation greedy, forced;
};

// Prompts of kGenerationLengths tokens and kGenerationSteps new tokens each: the longest with its
// continuation passes the tiny families' sliding windows (5 and 6) several times over.
inline constexpr const char* kGenerationLengths = "9,4,13";
inline constexpr int64_t kGenerationSteps = 8;

// Written on first use, as family_folder; null without a Python with torch.
inline const GenerationReference* generation_reference(const std::string& family) {
  static ScratchDir* root = new ScratchDir();
  static std::map<std::string, std::unique_ptr<GenerationReference>> made;
  static const std::string python = python_with_torch();
  if (python.empty()) return nullptr;
  auto& slot = made[family];
  if (slot) return slot.get();
  auto r = std::make_unique<GenerationReference>();
  r->dir = root->file(family);
  const std::string command =
      python + " " + PSTAR_SOURCE_DIR + "/tests/reference/decoder_reference.py --family " + family +
      " --weights-only --generate " + kGenerationLengths + " --new-tokens " +
      std::to_string(kGenerationSteps) + " --out " + r->dir + " >/dev/null";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "failed: " << command;
    return nullptr;
  }
  const auto j = nlohmann::json::parse(read_text(r->dir + "/generate.json"));
  r->prompts = j.at("prompts").get<std::vector<std::vector<int64_t>>>();
  for (auto [name, to] : {std::pair{"greedy", &r->greedy}, std::pair{"forced", &r->forced}}) {
    to->tokens = j.at(name).at("tokens").get<std::vector<std::vector<int64_t>>>();
    to->logits = j.at(name).at("logits").get<std::vector<std::vector<std::vector<double>>>>();
  }
  slot = std::move(r);
  return slot.get();
}

// A run that trains the folder as the script's reference does: its tokens in sequential windows,
// constant lr, AdamW with its weight decay, no clipping, fp32, `steps` steps.
inline config::TrainConfig family_training_config(const FamilyFolder& f) {
  config::TrainConfig c;
  c.model.init_from = f.dir;
  c.model.seq_len = f.seq;
  c.data.path = f.tokens;
  c.data.sampling = "sequential";
  c.train_micro_batch_size_per_gpu = f.batch;
  c.optimizer.lr = f.lr;
  c.optimizer.weight_decay = f.weight_decay;
  c.training.steps = static_cast<int64_t>(f.losses.size());
  c.training.lr_schedule.type = "constant";
  c.gradient_clipping = 0;
  return c;
}

}  // namespace pstar::testing
