#include "pstar/checkpoint/merge.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/base/version.h"
#include "pstar/checkpoint/store.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/model_shape.h"
#include "shard_io.h"

namespace pstar::checkpoint {

namespace fs = std::filesystem;
using internal::indexed_tensor;
using internal::progress;
using internal::read_one_file;
using internal::tensor_bytes;

namespace {

std::string shape_text(c10::IntArrayRef shape) { return str_cat(shape); }

c10::ScalarType scalar_type(MergeDType dtype) {
  switch (dtype) {
    case MergeDType::kFp32:
      return torch::kFloat32;
    case MergeDType::kBf16:
      return torch::kBFloat16;
    case MergeDType::kFp16:
      return torch::kFloat16;
  }
  PSTAR_INTERNAL_ASSERT(false, "unhandled MergeDType ", static_cast<int>(dtype));
}

formats::DType safetensors_dtype(c10::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return formats::DType::kF32;
    case torch::kBFloat16:
      return formats::DType::kBF16;
    case torch::kFloat16:
      return formats::DType::kF16;
    case torch::kFloat64:
      return formats::DType::kF64;
    default:
      break;
  }
  PSTAR_THROW(FormatError, "a parameter has dtype ", type,
              "; merge-ckpt writes floating-point parameters only");
}

enum class OutputKind { kSafetensors, kPickle, kHfFolder, kCheckpointDir };

OutputKind output_kind(const MergeOptions& o) {
  if (o.reshard > 0) return OutputKind::kCheckpointDir;
  const std::string ext = fs::path(o.output).extension().string();
  if (ext == ".safetensors") return OutputKind::kSafetensors;
  if (ext == ".pt") return OutputKind::kPickle;
  PSTAR_CHECK(ext.empty(), ConfigError, "-o ", o.output, ": unknown output kind '", ext,
              "'; give a .safetensors or .pt file name, or a folder name without an extension "
              "for a Hugging Face model folder (or a directory with --reshard)");
  return OutputKind::kHfFolder;
}

// The training config a checkpoint's files were written under, if it describes the GPT whose
// parameters the index holds; nullopt (and `why`) otherwise.
std::optional<config::TrainConfig> gpt_config_of(const CheckpointIndex& index,
                                                 const std::string& config_path, std::string* why) {
  if (config_path.empty()) {
    *why = "the checkpoint has no config.json";
    return std::nullopt;
  }
  config::TrainConfig config;
  std::vector<model::ParameterShape> expected;
  try {
    config = config::load_train_config(config_path);
    expected = model::resolve_model_shape(config.model).parameter_shapes();
  } catch (const Error& e) {
    *why = str_cat(config_path, " describes no model pstar builds (", e.what(), ")");
    return std::nullopt;
  }
  std::map<std::string, const ShardParameter*> have;
  for (const auto& p : index.params) have.emplace(p.name, &p);
  for (const auto& e : expected) {
    auto it = have.find(e.name);
    if (it == have.end()) {
      *why = str_cat("the GPT that ", config_path, " describes has a tensor '", e.name,
                     "' that no checkpoint file holds");
      return std::nullopt;
    }
    if (c10::IntArrayRef(it->second->shape) != c10::IntArrayRef(e.shape)) {
      *why = str_cat(index.files[static_cast<size_t>(it->second->rank)], ": tensor '", e.name,
                     "' has shape ", shape_text(it->second->shape), " but the GPT that ",
                     config_path, " describes has ", shape_text(e.shape));
      return std::nullopt;
    }
  }
  if (have.size() != expected.size()) {
    std::set<std::string> names;
    for (const auto& e : expected) names.insert(e.name);
    for (const auto& p : index.params) {
      if (names.count(p.name)) continue;
      *why = str_cat(index.files[static_cast<size_t>(p.rank)], " holds '", p.name,
                     "', which is not a parameter of the GPT that ", config_path, " describes");
      return std::nullopt;
    }
  }
  return config;
}

std::string config_beside(const std::string& output) {
  return (fs::path(output).parent_path() / "config.json").string();
}

bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a.empty() ? "." : a, b.empty() ? "." : b, ec);
}

// Creates the output's missing parent directories, once every check has passed.
void make_parent_dirs(const std::string& output) {
  const fs::path parent = fs::path(output).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  PSTAR_CHECK(!ec && fs::is_directory(parent), IoError, "-o ", output, ": cannot create ",
              parent.string(), ": ", ec ? ec.message() : "a file of that name is in the way");
}

// ---- the outputs (Note [merge passes]) ----------------------------------------------------------

// Note [merge passes]: the second pass. Reads one input file at a time and hands each of its
// parameters, in `dtype` and contiguous, to `write`; counts what was written and held (with what
// `kept` says the writer keeps). A parameter in pieces (Note [checkpoint pieces]) is joined as its
// files come and handed over once its last piece is in (write_order).
MergeSummary stream_parameters(
    const CheckpointIndex& index, c10::ScalarType dtype,
    const std::function<void(const std::string&, const at::Tensor&)>& write,
    const std::function<int64_t()>& kept = nullptr) {
  MergeSummary summary;
  std::map<std::string, at::Tensor> joining;
  int64_t joining_bytes = 0;
  for (size_t r = 0; r < index.files.size(); ++r) {
    const std::string& file = index.files[r];
    const auto rank = static_cast<int64_t>(r);
    const TensorMap tensors = read_one_file(file);
    int64_t held = 0;
    for (const auto& [name, t] : tensors) held += tensor_bytes(t);
    int64_t converted = 0;
    for (const auto& p : index.params) {
      at::Tensor value;
      if (!p.in_pieces()) {
        if (p.rank != rank) continue;
        value = indexed_tensor(tensors, p, file).to(dtype).contiguous();
        if (dtype != p.dtype) converted = std::max(converted, tensor_bytes(value));
      } else {
        at::Tensor& whole = joining[p.name];
        for (const ShardPiece& piece : p.pieces) {
          if (piece.rank != rank) continue;
          if (!whole.defined()) {
            whole = torch::empty({p.numel()}, torch::dtype(dtype));
            joining_bytes += tensor_bytes(whole);
          }
          whole.slice(0, piece.begin, piece.begin + piece.numel)
              .copy_(internal::indexed_piece(tensors, p, piece, file));
        }
        summary.peak_held_bytes =
            std::max(summary.peak_held_bytes, held + joining_bytes + (kept ? kept() : 0));
        if (p.last_rank() != rank) continue;
        value = whole.view(p.shape);
        joining_bytes -= tensor_bytes(whole);
        joining.erase(p.name);
      }
      write(p.name, value);
      ++summary.tensors;
      summary.bytes += tensor_bytes(value);
    }
    summary.peak_held_bytes =
        std::max(summary.peak_held_bytes, held + converted + joining_bytes + (kept ? kept() : 0));
    progress(str_cat("merge-ckpt: copied ", file, " (", r + 1, "/", index.files.size(), ")"));
  }
  log::end_status();
  return summary;
}

// The order stream_parameters hands the parameters over in: file by file, each whole one with its
// file, each one in pieces with the file of its last piece.
std::vector<const ShardParameter*> write_order(const CheckpointIndex& index) {
  std::vector<const ShardParameter*> order;
  for (size_t r = 0; r < index.files.size(); ++r)
    for (const auto& p : index.params)
      if ((p.in_pieces() ? p.last_rank() : p.rank) == static_cast<int64_t>(r)) order.push_back(&p);
  return order;
}

MergeSummary write_safetensors(const CheckpointIndex& index, const MergeOptions& o) {
  const c10::ScalarType dtype = scalar_type(o.dtype);
  std::vector<formats::SafetensorsStreamWriter::Entry> entries;
  for (const auto& p : index.params) entries.push_back({p.name, safetensors_dtype(dtype), p.shape});
  // Hugging Face's loaders want "format": "pt"; the rest says where the tensors came from.
  std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"pstar.step", std::to_string(index.step)}, {"pstar.version", version()}};
  if (!index.run_id.empty()) metadata["pstar.run_id"] = index.run_id;
  formats::SafetensorsStreamWriter writer(o.output, entries, metadata);

  MergeSummary summary =
      stream_parameters(index, dtype, [&](const std::string& name, const at::Tensor& value) {
        writer.write(name, value.data_ptr(), value.nbytes());
      });
  writer.commit();
  summary.outputs.push_back(o.output);
  return summary;
}

// A decoder's tensors as its family's checkpoints spell them (decoder_checkpoint_tensors): in the
// order stream_parameters completes them (a fused tensor when its last part comes), each with the
// parts it still waits for.
struct HfTensorPlan {
  std::vector<model::CheckpointTensor> tensors;              // in write order
  std::map<std::string, std::pair<size_t, size_t>> part_of;  // parameter -> (tensor, part)
};

HfTensorPlan hf_tensor_plan(const CheckpointIndex& index, const model::ModelShape& shape) {
  std::vector<model::CheckpointTensor> all;
  if (shape.family == model::ModelFamily::kDecoder) {
    // Experts under their per-expert names whatever layout the run read: the Hub's, which
    // transformers 4 reads and transformers 5 converts on load.
    model::DecoderConfig written = shape.decoder;
    written.hf.fused_experts = false;
    all = model::decoder_checkpoint_tensors(written);
  } else {
    for (const auto& p : shape.parameter_shapes())
      all.push_back({p.name, p.shape, {{p.name, p.shape[0]}}});
  }
  std::map<std::string, std::pair<size_t, size_t>> where;
  for (size_t t = 0; t < all.size(); ++t)
    for (size_t k = 0; k < all[t].parts.size(); ++k) where[all[t].parts[k].parameter] = {t, k};
  HfTensorPlan plan;
  std::vector<size_t> missing(all.size());
  for (size_t t = 0; t < all.size(); ++t) missing[t] = all[t].parts.size();
  std::map<size_t, size_t> placed;  // index in `all` -> index in plan.tensors
  for (const ShardParameter* p : write_order(index)) {
    const auto it = where.find(p->name);
    PSTAR_INTERNAL_ASSERT(it != where.end(), "checkpoint parameter ", p->name,
                          " has no tensor in the Hugging Face folder");
    const size_t t = it->second.first;
    if (--missing[t] > 0) continue;
    placed[t] = plan.tensors.size();
    plan.tensors.push_back(all[t]);
  }
  for (const auto& [name, at] : where) plan.part_of[name] = {placed.at(at.first), at.second};
  return plan;
}

// A wrapping folder's tensors that are not the decoder's (Gemma 3's vision tower and projector):
// copied from the folder the run trained from, as they were read.
struct CarriedTensors {
  formats::HfFolder folder;
  std::vector<formats::HfFolderWriter::Tensor> entries;
  std::map<std::string, std::string> shard;  // name -> shard path
};

CarriedTensors carried_tensors(const model::DecoderConfig& c, const std::string& source) {
  CarriedTensors out;
  PSTAR_CHECK(formats::is_directory(source), ConfigError, "merge-ckpt: the model is the language ",
              "model of a ", c.hf.wrapper->model_type, " folder whose other parts come from ",
              source, ", which is gone; merge into a .safetensors or .pt file instead");
  out.folder = formats::read_hf_folder(source);
  for (const std::string& shard : out.folder.shards) {
    const formats::SafetensorsReader reader(shard);
    for (const auto& t : reader.tensors()) {
      if (starts_with(t.name, c.hf.wrapper->weight_prefix) ||
          starts_with(t.name, c.hf.wrapper->head_prefix) || out.shard.count(t.name))
        continue;
      out.entries.push_back({t.name, t.dtype, t.shape});
      out.shard[t.name] = shard;
    }
  }
  return out;
}

// A Hugging Face folder (Note [atomic folder] in formats/hf_folder.h): its config.json describes
// the model the checkpoint's config trained, in Hugging Face's keys; the tensors go in file order,
// one input file at a time, into shards of at most o.max_shard_bytes, spelled as the family's
// checkpoints spell them (Phi-3's projections fused again; a wrapper's prefixes, and its other
// parts copied back from the folder the run read).
MergeSummary write_hf_folder(const CheckpointIndex& index, const MergeOptions& o,
                             const config::TrainConfig& config) {
  const c10::ScalarType dtype = scalar_type(o.dtype);
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  const char* torch_dtype = o.dtype == MergeDType::kBf16   ? "bfloat16"
                            : o.dtype == MergeDType::kFp16 ? "float16"
                                                           : "float32";
  const HfTensorPlan plan = hf_tensor_plan(index, shape);
  std::vector<formats::HfFolderWriter::Tensor> tensors;
  for (const auto& t : plan.tensors) tensors.push_back({t.name, safetensors_dtype(dtype), t.shape});
  std::optional<CarriedTensors> carried;
  if (shape.family == model::ModelFamily::kDecoder && shape.decoder.hf.wrapper) {
    carried = carried_tensors(shape.decoder, shape.hf_folder);
    tensors.insert(tensors.end(), carried->entries.begin(), carried->entries.end());
  }
  formats::HfFolderWriter writer(o.output, model::hf_config_json(shape, torch_dtype), tensors,
                                 o.max_shard_bytes);
  std::map<size_t, std::vector<at::Tensor>> parts;  // fused tensors waiting for parts
  int64_t waiting_bytes = 0;
  MergeSummary summary = stream_parameters(
      index, dtype,
      [&](const std::string& name, const at::Tensor& value) {
        const auto [t, k] = plan.part_of.at(name);
        const model::CheckpointTensor& tensor = plan.tensors[t];
        if (tensor.parts.size() == 1) {
          writer.write(tensor.name, value.data_ptr(), value.nbytes());
          return;
        }
        std::vector<at::Tensor>& have = parts[t];
        have.resize(tensor.parts.size());
        have[k] = value.clone();
        waiting_bytes += tensor_bytes(have[k]);
        for (const auto& part : have)
          if (!part.defined()) return;
        const at::Tensor joined = torch::cat(have, 0);
        writer.write(tensor.name, joined.data_ptr(), joined.nbytes());
        for (const auto& part : have) waiting_bytes -= tensor_bytes(part);
        parts.erase(t);
      },
      [&] { return waiting_bytes; });
  if (carried) {
    for (const auto& e : carried->entries) {
      const formats::SafetensorsReader reader(carried->shard.at(e.name));
      const formats::TensorInfo* info = reader.find(e.name);
      writer.write(e.name, reader.data(*info), info->size_bytes);
    }
    log::info("merge-ckpt: copied ", carried->entries.size(), " tensor(s) of the ",
              shape.decoder.hf.wrapper->model_type, " model that pstar does not train from ",
              shape.hf_folder);
  }
  writer.commit();
  log::info("merge-ckpt: ", writer.num_shards(), " shard(s) in the Hugging Face folder ", o.output);
  summary.outputs.push_back(o.output);
  return summary;
}

MergeSummary write_pickle(const CheckpointIndex& index, const MergeOptions& o) {
  const c10::ScalarType dtype = scalar_type(o.dtype);
  TensorList out;  // the whole model: LibTorch's pickler needs every tensor of a file at once
  int64_t out_bytes = 0;
  MergeSummary summary = stream_parameters(
      index, dtype,
      [&](const std::string& name, const at::Tensor& value) {
        out_bytes += tensor_bytes(value);
        out.emplace_back(name, value);
      },
      [&] { return out_bytes; });
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  write_checkpoint_file(o.output, out);
  summary.tensors = static_cast<int64_t>(out.size());
  summary.bytes = out_bytes;
  summary.outputs.push_back(o.output);
  return summary;
}

}  // namespace

void read_checkpoint_parameters(
    const CheckpointIndex& index, c10::ScalarType dtype,
    const std::function<void(const std::string&, const at::Tensor&)>& write) {
  stream_parameters(index, dtype, write);
}

void check_merge_options(const MergeOptions& o) {
  PSTAR_CHECK(!o.output.empty(), ConfigError, "-o: give the output file");
  if (o.reshard > 0) {
    PSTAR_CHECK(o.dtype == MergeDType::kFp32, ConfigError,
                "--dtype: a resharded checkpoint keeps the fp32 masters and Adam state; drop "
                "--dtype or merge into a file instead of --reshard");
    std::error_code ec;
    PSTAR_CHECK(!fs::exists(o.output, ec), ConfigError, "-o ", o.output,
                ": already exists; --reshard creates a new checkpoint directory there");
  } else {
    PSTAR_CHECK(o.reshard == 0, ConfigError, "--reshard ", o.reshard, ": expected at least 1");
    PSTAR_CHECK(o.max_shard_bytes > 0, ConfigError, "--max-shard-size: expected a positive size");
    if (output_kind(o) != OutputKind::kHfFolder) {
      PSTAR_CHECK(!fs::is_directory(o.output), ConfigError, "-o ", o.output,
                  ": is a directory; give a file name");
    }
  }
}

MergeSummary merge_checkpoint(const CheckpointIndex& index, const MergeOptions& o) {
  check_merge_options(o);
  PSTAR_INTERNAL_ASSERT(!index.files.empty() && index.run_state.size() == index.files.size());
  const OutputKind kind = output_kind(o);
  std::string why;
  if (kind == OutputKind::kCheckpointDir) {
    const std::string config_path = o.config_path.empty() ? index.config_path : o.config_path;
    PSTAR_CHECK(!config_path.empty(), ConfigError,
                "--reshard: ", fs::path(index.files[0]).parent_path().string(),
                " has no config.json, which tells how the model's parameters fall into chunks; "
                "give the training config with --config");
    auto config = gpt_config_of(index, config_path, &why);
    PSTAR_CHECK(config.has_value(), FormatError, "--reshard: ", why,
                "; resharding follows the chunk layout of a GPT config");
    make_parent_dirs(o.output);
    return internal::write_resharded(index, o, *config);
  }

  if (kind == OutputKind::kHfFolder) {
    auto config = gpt_config_of(index, index.config_path, &why);
    PSTAR_CHECK(config.has_value(), FormatError, "-o ", o.output,
                ": a Hugging Face folder's config.json describes the model, which comes from the "
                "checkpoint's training config, but ",
                why, "; merge into a .safetensors or .pt file instead");
    make_parent_dirs(o.output);
    return write_hf_folder(index, o, *config);
  }

  // A config.json beside the output that trains from it (model.init_from). Built before anything
  // is written, so a problem with it leaves nothing behind.
  std::string config_text;
  const fs::path output(o.output);
  const bool in_checkpoint_dir =
      !index.config_path.empty() &&
      same_directory(output.parent_path(), fs::path(index.config_path).parent_path());
  if (in_checkpoint_dir && o.beside_checkpoint) {
    log::info("merge-ckpt: no config.json written beside ", o.output, ": ", index.config_path,
              " is the run's own; to train from the merged file, merge with -o into another "
              "directory, which gets a config.json that does");
  } else if (auto config = gpt_config_of(index, index.config_path, &why);
             config &&
             model::resolve_model_shape(config->model).family != model::ModelFamily::kGpt) {
    // A decoder trains again from a Hugging Face folder (config.json beside the weights), not
    // from one file: a config.json naming this file would not describe it.
    log::warn("merge-ckpt: no config.json written beside ", o.output,
              ": a decoder trains from a Hugging Face folder; put this file in one "
              "beside the config.json of the folder it was trained from");
  } else if (config) {
    PSTAR_CHECK(!in_checkpoint_dir, ConfigError, "-o ", o.output,
                ": its config.json would replace the checkpoint's own ", index.config_path,
                "; write the output to another directory");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(config::to_json_text(*config));
    // Relative to the new config file's directory, where it lies.
    j["model"]["init_from"] = output.filename().string();
    // A run from merged weights is a new run: it should not write into the old run's save_dir.
    j["training"]["save_dir"] = "";
    j["training"]["save_interval"] = 0;
    config_text = j.dump(2) + "\n";
  } else {
    log::warn("merge-ckpt: writing no config.json beside ", o.output, ": ", why);
  }

  make_parent_dirs(o.output);
  MergeSummary summary =
      kind == OutputKind::kSafetensors ? write_safetensors(index, o) : write_pickle(index, o);
  if (!config_text.empty()) {
    const std::string path = config_beside(o.output);
    formats::write_file_atomic(path, config_text.data(), config_text.size());
    summary.outputs.push_back(path);
  }
  return summary;
}

}  // namespace pstar::checkpoint
