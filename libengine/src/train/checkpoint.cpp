#include "pstar/train/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"

namespace pstar::train {

namespace fs = std::filesystem;

void write_checkpoint_file(const std::string& path, const TensorList& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor.detach().cpu().contiguous());
  const std::vector<char> bytes = torch::pickle_save(dict);
  formats::write_file_atomic(path, bytes.data(), bytes.size());
}

TensorMap read_checkpoint_file(const std::string& path) {
  PSTAR_CHECK(fs::is_regular_file(path) && std::ifstream(path).good(), IoError,
              "cannot read checkpoint ", path);
  c10::IValue value;
  try {
    // torch::pickle_load would need the whole file in memory besides the tensors it holds; the
    // archive reader reads each tensor's record straight into its storage.
    caffe2::serialize::PyTorchStreamReader reader(path);
    value = torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt,
                                              c10::nullopt, reader);
  } catch (const c10::Error& e) {
    PSTAR_THROW(FormatError, path,
                ": not a readable checkpoint (truncated or corrupt: ", e.what_without_backtrace(),
                ")");
  } catch (const std::exception& e) {
    PSTAR_THROW(FormatError, path, ": not a readable checkpoint (truncated or corrupt: ", e.what(),
                ")");
  }
  PSTAR_CHECK(value.isGenericDict(), FormatError, path, ": expected a dict of tensors, found ",
              value.tagKind());
  TensorMap out;
  for (const auto& item : value.toGenericDict()) {
    PSTAR_CHECK(item.key().isString() && item.value().isTensor(), FormatError, path,
                ": expected a dict of name -> tensor; found an entry of ", item.key().tagKind(),
                " -> ", item.value().tagKind());
    out.emplace(item.key().toStringRef(), item.value().toTensor());
  }
  return out;
}

const at::Tensor& checkpoint_tensor(const TensorMap& tensors, const std::string& name,
                                    const std::string& file, c10::IntArrayRef shape,
                                    c10::ScalarType dtype) {
  auto it = tensors.find(name);
  PSTAR_CHECK(it != tensors.end(), FormatError, file, ": tensor '", name,
              "' is missing; was this checkpoint written for another model?");
  const at::Tensor& t = it->second;
  PSTAR_CHECK(t.sizes() == shape, FormatError, file, ": tensor '", name, "' has shape ", t.sizes(),
              " but this run needs ", shape,
              "; the checkpoint was written for another model shape");
  PSTAR_CHECK(t.scalar_type() == dtype, FormatError, file, ": tensor '", name, "' has dtype ",
              t.scalar_type(), " but this run needs ", dtype);
  return t;
}

std::string checkpoint_dir(const std::string& save_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return (fs::path(save_dir) / name).string();
}

void write_latest(const std::string& save_dir, const std::string& dir) {
  const std::string text = fs::path(dir).filename().string() + "\n";
  formats::write_file_atomic((fs::path(save_dir) / "latest").string(), text.data(), text.size());
}

std::string checkpoint_file(const std::string& dir, int64_t rank) {
  return (fs::path(dir) / ("ckpt-" + std::to_string(rank) + ".pt")).string();
}

void write_manifest(const std::string& dir, const CheckpointManifest& manifest) {
  nlohmann::json j = {{"format_version", 1},
                      {"world_size", manifest.world_size},
                      {"step", manifest.step},
                      {"run_id", manifest.run_id}};
  std::vector<std::string> files;
  for (int64_t r = 0; r < manifest.world_size; ++r)
    files.push_back(fs::path(checkpoint_file(dir, r)).filename().string());
  j["files"] = files;
  const std::string text = j.dump(2) + "\n";
  formats::write_file_atomic((fs::path(dir) / "manifest.json").string(), text.data(), text.size());
}

CheckpointManifest read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  CheckpointManifest manifest;
  if (!fs::exists(path)) return manifest;
  std::ifstream in(path);
  nlohmann::json j;
  try {
    in >> j;
    manifest.world_size = j.at("world_size").get<int64_t>();
    manifest.step = j.at("step").get<int64_t>();
    manifest.run_id = j.at("run_id").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    PSTAR_THROW(FormatError, path.string(), ": not a valid checkpoint manifest (", e.what(),
                "); it needs world_size, step and run_id");
  }
  PSTAR_CHECK(manifest.world_size >= 1, FormatError, path.string(), ": world_size ",
              manifest.world_size, " must be at least 1");
  return manifest;
}

std::string resolve_resume_dir(const std::string& dir) {
  if (fs::is_regular_file(fs::path(dir) / "ckpt-0.pt")) return dir;
  const fs::path latest = fs::path(dir) / "latest";
  std::ifstream in(latest);
  std::string name;
  PSTAR_CHECK(in.good() && std::getline(in, name) && !name.empty(), IoError, "--resume ", dir,
              ": neither ", (fs::path(dir) / "ckpt-0.pt").string(), " nor ", latest.string(),
              " exists; give a checkpoint directory (step-N) or a training.save_dir");
  const std::string resolved = (fs::path(dir) / name).string();
  PSTAR_CHECK(fs::is_regular_file(fs::path(resolved) / "ckpt-0.pt"), IoError, "--resume ", dir,
              ": ", latest.string(), " names ", name, ", which has no ckpt-0.pt");
  return resolved;
}

}  // namespace pstar::train
