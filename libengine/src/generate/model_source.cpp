#include "model_source.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/checkpoint/index.h"
#include "pstar/checkpoint/merge.h"
#include "pstar/checkpoint/store.h"
#include "pstar/core/log.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/factory.h"

namespace pstar::generate::internal {

namespace fs = std::filesystem;

ModelSource find_model_source(const std::string& path) {
  ModelSource s;
  s.given = path;
  PSTAR_CHECK(fs::is_directory(path), ConfigError, "MODEL ", path,
              ": not a directory; give a checkpoint (a step directory, or a training.save_dir) "
              "or a Hugging Face model folder");
  if (fs::exists(fs::path(path) / "ckpt-0.pt") || fs::exists(fs::path(path) / "latest")) {
    s.checkpoint_dir = checkpoint::resolve_resume_dir(path).dir;
    const std::string config = (fs::path(s.checkpoint_dir) / "config.json").string();
    PSTAR_CHECK(fs::exists(config), ConfigError, "MODEL ", path, ": the checkpoint ",
                s.checkpoint_dir,
                " has no config.json, which says what model its files hold (pstar train writes "
                "one beside them)");
    s.run = config::load_train_config(config);
    if (formats::is_directory(s.run->model.init_from)) s.folder = s.run->model.init_from;
    s.shape = model::resolve_model_shape(s.run->model);
    return s;
  }
  PSTAR_CHECK(fs::exists(fs::path(path) / "config.json"), ConfigError, "MODEL ", path,
              ": neither a checkpoint (no ckpt-0.pt, no latest) nor a Hugging Face model folder "
              "(no config.json)");
  s.folder = path;
  config::ModelConfig m;
  m.init_from = path;
  m.seq_len = 1;  // a decoder's rotary tables are sized once the prompts are known
  s.shape = model::resolve_model_shape(m);
  return s;
}

int64_t model_positions(const model::ModelShape& shape) {
  return shape.family == model::ModelFamily::kDecoder ? shape.decoder.max_positions
                                                      : shape.gpt.seq_len;
}

namespace {

// Every parameter of every rank's file, checked as merge-ckpt checks them (Note [merge checks]).
void load_checkpoint(const ModelSource& s, model::CausalLM& model) {
  const std::vector<std::string> files = checkpoint::checkpoint_files_in(s.checkpoint_dir);
  const int64_t ranks = fs::exists(fs::path(s.checkpoint_dir) / "manifest.json")
                            ? checkpoint::read_manifest(s.checkpoint_dir).world_size
                            : static_cast<int64_t>(files.size());
  checkpoint::IndexOptions options;
  options.label = "generate";
  const checkpoint::CheckpointIndex index = checkpoint::index_checkpoint(files, ranks, options);
  auto params = model.named_parameters();
  size_t loaded = 0;
  torch::NoGradGuard no_grad;
  checkpoint::read_checkpoint_parameters(
      index, torch::kFloat32, [&](const std::string& name, const at::Tensor& value) {
        at::Tensor* p = params.find(name);
        PSTAR_CHECK(p != nullptr, FormatError, s.checkpoint_dir, " holds '", name,
                    "', which is not a parameter of the model its config.json describes");
        PSTAR_CHECK(p->sizes() == value.sizes(), FormatError, s.checkpoint_dir, ": '", name,
                    "' has shape ", value.sizes(), " but the model's is ", p->sizes());
        p->copy_(value);
        ++loaded;
      });
  PSTAR_CHECK(loaded == params.size(), FormatError, s.checkpoint_dir, " holds ", loaded, " of the ",
              params.size(), " parameters of the model its config.json describes");
  log::info("generate: loaded ", loaded, " parameters of step ", index.step, " from ",
            index.files.size(), " file(s) in ", s.checkpoint_dir);
}

}  // namespace

std::shared_ptr<model::CausalLM> load_model(ModelSource& s, int64_t slots, c10::ScalarType dtype,
                                            c10::Device device) {
  if (s.shape.family == model::ModelFamily::kDecoder) {
    // The rotary tables of the training path cover the forward without the cache (Note [kv cache]).
    s.shape.decoder.seq_len = std::min(slots, s.shape.decoder.max_positions);
    model::validate_decoder_config(s.shape.decoder, s.given);
  }
  model::BuildOptions build;
  build.initialise = false;
  auto model = model::build_causal_lm(s.shape, build);
  {
    // Each parameter in its final dtype and place before the weights arrive, so that the host
    // never holds an fp32 copy of a model that runs in bf16 on the GPU.
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters())
      p.set_data(torch::empty(p.sizes(), p.options().dtype(dtype).device(device)));
  }
  if (!s.checkpoint_dir.empty())
    load_checkpoint(s, *model);
  else
    model::load_pretrained(s.shape, s.folder, *model);
  model->eval();
  return model;
}

std::vector<int64_t> generation_config_stops(const std::string& folder) {
  if (folder.empty()) return {};
  const fs::path path = fs::path(folder) / "generation_config.json";
  if (!fs::exists(path)) return {};
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    PSTAR_THROW(FormatError, path.string(), " is not valid JSON: ", e.what());
  }
  PSTAR_CHECK(j.is_object(), FormatError, path.string(), " is not a JSON object");
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  std::vector<int64_t> ids;
  auto take = [&](const nlohmann::json& v) {
    PSTAR_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, FormatError, path.string(),
                ": eos_token_id holds ", v.dump(), "; expected token ids (a number or a list)");
    ids.push_back(v.get<int64_t>());
  };
  if (it->is_array()) {
    for (const auto& v : *it) take(v);
  } else {
    take(*it);
  }
  return ids;
}

}  // namespace pstar::generate::internal
