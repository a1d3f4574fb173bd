#include "pstar/train/merge.h"
#include "pstar/train/checkpoint_schema.h"

#include <glob.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/base/strings.h"
#include "pstar/base/version.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/formats/file_guard.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/formats/safetensors.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/train/checkpoint.h"

namespace pstar::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using ckpt::kFormatVersion;
const std::string kRunStatePrefix = ckpt::kRunPrefix;

int64_t tensor_bytes(const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()); }

// `ckpt-<rank>.pt` -> rank; nullopt for any other name.
std::optional<int64_t> rank_from_file_name(const std::string& path) {
  static const std::regex re(R"(ckpt-(\d{1,9})\.pt)");
  std::smatch m;
  const std::string name = fs::path(path).filename().string();
  if (!std::regex_match(name, m, re)) return std::nullopt;
  return std::stoll(m[1]);
}

// An int64 scalar of a checkpoint's run state; FormatError naming the file otherwise.
std::optional<int64_t> run_scalar(const TensorMap& tensors, const std::string& name,
                                  const std::string& file) {
  auto it = tensors.find(name);
  if (it == tensors.end()) return std::nullopt;
  const at::Tensor& t = it->second;
  PSTAR_CHECK(t.numel() == 1 && t.scalar_type() == torch::kInt64, FormatError, file, ": '", name,
              "' should be one int64, but it is ", t.scalar_type(), " of shape ", t.sizes());
  return t.item<int64_t>();
}

int64_t required_run_scalar(const TensorMap& tensors, const std::string& name,
                            const std::string& file) {
  const auto value = run_scalar(tensors, name, file);
  PSTAR_CHECK(value.has_value(), FormatError, file, ": tensor '", name,
              "' is missing; is this a checkpoint file written by pstar train?");
  return *value;
}

// Whether `name` is the Adam state (<param>.exp_avg / .exp_avg_sq) of a parameter in `tensors`.
bool is_adam_state(const TensorMap& tensors, const std::string& name) {
  for (const char* suffix : {ckpt::kExpAvg, ckpt::kExpAvgSq}) {
    if (ends_with(name, suffix) &&
        tensors.count(name.substr(0, name.size() - std::strlen(suffix))) > 0)
      return true;
  }
  return false;
}

bool is_parameter(const TensorMap& tensors, const std::string& name) {
  return !starts_with(name, kRunStatePrefix) && !is_adam_state(tensors, name);
}

// Reads one checkpoint file after handing the memory of the previous one back to the system.
// glibc raises its mmap threshold as large blocks are freed, so later tensors come from the heap,
// and what a file's tensors leave there stays resident unless trimmed: without this the peak
// grows to several files' worth (Note [merge passes]).
TensorMap read_one_file(const std::string& file) {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
  return read_checkpoint_file(file);
}

// The live progress line, only where info lines are shown.
void progress(const std::string& line) {
  if (log::level() <= log::Level::kInfo) log::status(line);
}

std::string shape_text(c10::IntArrayRef shape) { return str_cat(shape); }

std::string file_list(const std::vector<std::string>& files, size_t limit = 4) {
  std::string out;
  for (size_t i = 0; i < files.size() && i < limit; ++i) out += (i ? ", " : "") + files[i];
  if (files.size() > limit) out += str_cat(", ... (", files.size(), " in all)");
  return out.empty() ? "none" : out;
}

// The manifest's own format version (read_manifest does not look at it).
void check_manifest_version(const std::string& dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  std::ifstream in(path);
  int64_t version = kFormatVersion;
  try {
    json j;
    in >> j;
    version = j.value("format_version", kFormatVersion);
  } catch (const json::exception& e) {
    PSTAR_THROW(FormatError, path.string(), ": not a valid checkpoint manifest (", e.what(), ")");
  }
  PSTAR_CHECK(version == kFormatVersion, FormatError, path.string(), ": checkpoint format version ",
              version, " is not supported by this pstar (expected ", kFormatVersion, ")");
}

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

enum class OutputKind { kSafetensors, kPickle, kCheckpointDir };

OutputKind output_kind(const MergeOptions& o) {
  if (o.reshard > 0) return OutputKind::kCheckpointDir;
  const std::string ext = fs::path(o.output).extension().string();
  if (ext == ".safetensors") return OutputKind::kSafetensors;
  if (ext == ".pt") return OutputKind::kPickle;
  PSTAR_THROW(ConfigError, "-o ", o.output, ": unknown output kind '",
              ext.empty() ? std::string("(no extension)") : ext,
              "'; give a .safetensors or .pt file name (or a directory with --reshard)");
}

// The tensors of one checkpoint file that the index said it holds, as read in the second pass
// (Note [merge passes]): FormatError if the file changed in between.
const at::Tensor& indexed_tensor(const TensorMap& tensors, const ShardParameter& p,
                                 const std::string& file) {
  auto it = tensors.find(p.name);
  PSTAR_CHECK(it != tensors.end() && it->second.sizes() == c10::IntArrayRef(p.shape) &&
                  it->second.scalar_type() == p.dtype,
              FormatError, file, ": tensor '", p.name,
              "' is not what it was when the file was checked moments ago; was the checkpoint "
              "rewritten meanwhile?");
  return it->second;
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
  std::vector<model::GptParameterShape> expected;
  try {
    config = config::load_train_config(config_path);
    expected = model::gpt_parameter_shapes(model::resolve_gpt_config(config.model));
  } catch (const Error& e) {
    *why = str_cat(config_path, " describes no GPT (", e.what(), ")");
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

MergeSummary write_safetensors(const CheckpointIndex& index, const MergeOptions& o) {
  const c10::ScalarType dtype = scalar_type(o.dtype);
  std::vector<formats::SafetensorsStreamWriter::Entry> entries;
  for (const auto& p : index.params) entries.push_back({p.name, safetensors_dtype(dtype), p.shape});
  // Hugging Face's loaders want "format": "pt"; the rest says where the tensors came from.
  std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"pstar.step", std::to_string(index.step)}, {"pstar.version", version()}};
  if (!index.run_id.empty()) metadata["pstar.run_id"] = index.run_id;
  formats::SafetensorsStreamWriter writer(o.output, entries, metadata);

  MergeSummary summary;
  for (size_t r = 0; r < index.files.size(); ++r) {
    const std::string& file = index.files[r];
    const TensorMap tensors = read_one_file(file);
    int64_t held = 0;
    for (const auto& [name, t] : tensors) held += tensor_bytes(t);
    int64_t converted = 0;
    for (const auto& p : index.params) {
      if (p.rank != static_cast<int64_t>(r)) continue;
      const at::Tensor value = indexed_tensor(tensors, p, file).to(dtype).contiguous();
      if (dtype != p.dtype) converted = std::max(converted, tensor_bytes(value));
      writer.write(p.name, value.data_ptr(), value.nbytes());
      ++summary.tensors;
      summary.bytes += tensor_bytes(value);
    }
    summary.peak_held_bytes = std::max(summary.peak_held_bytes, held + converted);
    progress(str_cat("merge-ckpt: copied ", file, " (", r + 1, "/", index.files.size(), ")"));
  }
  writer.commit();
  log::end_status();
  summary.outputs.push_back(o.output);
  return summary;
}

MergeSummary write_pickle(const CheckpointIndex& index, const MergeOptions& o) {
  const c10::ScalarType dtype = scalar_type(o.dtype);
  MergeSummary summary;
  TensorList out;  // the whole model: LibTorch's pickler needs every tensor of a file at once
  int64_t out_bytes = 0;
  for (size_t r = 0; r < index.files.size(); ++r) {
    const std::string& file = index.files[r];
    const TensorMap tensors = read_one_file(file);
    int64_t held = 0;
    for (const auto& [name, t] : tensors) held += tensor_bytes(t);
    for (const auto& p : index.params) {
      if (p.rank != static_cast<int64_t>(r)) continue;
      at::Tensor value = indexed_tensor(tensors, p, file).to(dtype);
      out_bytes += tensor_bytes(value);
      out.emplace_back(p.name, std::move(value));
    }
    summary.peak_held_bytes = std::max(summary.peak_held_bytes, held + out_bytes);
    progress(str_cat("merge-ckpt: read ", file, " (", r + 1, "/", index.files.size(), ")"));
  }
  log::end_status();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  write_checkpoint_file(o.output, out);
  summary.tensors = static_cast<int64_t>(out.size());
  summary.bytes = out_bytes;
  summary.outputs.push_back(o.output);
  return summary;
}

// Which new rank owns each parameter (Note [reshard]); ConfigError if there are fewer chunks
// than ranks.
std::map<std::string, int64_t> new_owners(const config::TrainConfig& config, int64_t world,
                                          const char* what) {
  const plan::GptChunkMap map = plan::gpt_chunk_map(config);
  PSTAR_CHECK(map.layout.num_chunks >= world, ConfigError, what, " ", world, ": the model fits in ",
              map.layout.num_chunks, " chunk(s) of ", map.layout.chunk_size,
              " elements, fewer than the ", world,
              " ranks that would each own one; use fewer ranks or lower default_chunk_size in the "
              "config");
  std::map<std::string, int64_t> owner;
  for (size_t i = 0; i < map.params.size(); ++i)
    owner.emplace(map.params[i].name, map.chunks[i] % world);
  return owner;
}

// The tensors new rank `r` of `world` holds, given each parameter's new owner (Note [reshard]).
TensorList rank_tensors(const CheckpointIndex& index, const std::map<std::string, int64_t>& owner,
                        int64_t world, int64_t r, int64_t* peak_held_bytes) {
  const auto& first = index.run_state[0];
  TensorList out;
  int64_t kept_bytes = 0;
  std::set<int64_t> sources;
  for (const auto& p : index.params) {
    auto it = owner.find(p.name);
    PSTAR_CHECK(it != owner.end(), FormatError, index.files[static_cast<size_t>(p.rank)],
                ": tensor '", p.name, "' is not a parameter of the model the config describes");
    if (it->second == r) sources.insert(p.rank);
  }
  for (int64_t s : sources) {
    const std::string& file = index.files[static_cast<size_t>(s)];
    const TensorMap tensors = read_one_file(file);
    int64_t held = 0;
    for (const auto& [name, t] : tensors) held += tensor_bytes(t);
    const size_t first_from_file = out.size();
    for (const auto& p : index.params) {
      if (p.rank != s || owner.at(p.name) != r) continue;
      out.emplace_back(p.name, indexed_tensor(tensors, p, file));
      for (const char* suffix : {ckpt::kExpAvg, ckpt::kExpAvgSq}) {
        const std::string name = p.name + suffix;
        out.emplace_back(name, checkpoint_tensor(tensors, name, file, p.shape, torch::kFloat32));
      }
    }
    // This file's tensors, and what the output keeps of the files before it.
    if (peak_held_bytes != nullptr)
      *peak_held_bytes = std::max(*peak_held_bytes, held + kept_bytes);
    for (size_t i = first_from_file; i < out.size(); ++i) kept_bytes += tensor_bytes(out[i].second);
  }
  for (const char* name : {ckpt::kFormatVersionKey, ckpt::kStep, ckpt::kTokens, ckpt::kSkippedSteps,
                           ckpt::kLossScaler, ckpt::kAdamStep}) {
    const std::string key = name;
    auto it = first.find(key);
    PSTAR_CHECK(it != first.end(), FormatError, index.files[0], ": tensor '", key,
                "' is missing; a resumable checkpoint needs it");
    out.emplace_back(key, it->second);
  }
  const size_t rng_rank = r < index.world_size ? static_cast<size_t>(r) : 0;
  const auto& rng_source = index.run_state[rng_rank];
  auto rng = rng_source.find(ckpt::kRng);
  PSTAR_CHECK(rng != rng_source.end(), FormatError, index.files[rng_rank],
              ": tensor '__pstar__.rng' is missing; a resumable checkpoint needs it");
  out.emplace_back(rng->first, rng->second);
  out.emplace_back(ckpt::kRank, torch::tensor(r, torch::kInt64));
  out.emplace_back(ckpt::kWorldSize, torch::tensor(world, torch::kInt64));
  return out;
}

// Note [reshard]
// A checkpoint for M ranks holds in ckpt-<r>.pt the parameters (and their Adam state) of the
// chunks rank r owns: chunk k belongs to rank k % M, and which chunk a parameter lands in follows
// from the model's shape and the chunk keys of the config (plan::gpt_chunk_map), exactly as the
// chunk engine registers them, independent of the number of ranks. The run's counters, loss
// scaler and Adam step are the same on every rank and are copied from rank 0's file. The random
// state is per rank: new rank r takes old rank r's where there was one, else rank 0's. (pstar's
// GPT draws no random numbers while training, so this changes no result; a reshard to the same
// number of ranks resumes bit-identically.) `merge-ckpt --reshard` writes these tensors to files;
// `pstar train --resume` on another number of ranks loads them directly (resharded_rank_tensors),
// so the two continue the run identically.
MergeSummary write_resharded(const CheckpointIndex& index, const MergeOptions& o,
                             const config::TrainConfig& config) {
  const int64_t world = o.reshard;
  const std::map<std::string, int64_t> owner = new_owners(config, world, "--reshard");

  const fs::path target = fs::path(o.output);
  // The folder appears whole or not at all (Note [publish by rename]).
  formats::TempPath temp_dir(o.output);
  const fs::path temp = temp_dir.path();
  std::error_code ec;
  fs::create_directories(temp, ec);
  PSTAR_CHECK(!ec, IoError, "-o ", o.output, ": cannot create ", temp.string(), ": ", ec.message());

  MergeSummary summary;
  std::vector<FileDigest> digests;
  for (int64_t r = 0; r < world; ++r) {
    const TensorList out = rank_tensors(index, owner, world, r, &summary.peak_held_bytes);
    const std::string file = checkpoint_file(temp.string(), r);
    digests.push_back(write_checkpoint_file(file, out));
    for (const auto& [name, t] : out) {
      if (starts_with(name, kRunStatePrefix)) continue;
      ++summary.tensors;
      summary.bytes += tensor_bytes(t);
    }
    summary.outputs.push_back(checkpoint_file(o.output, r));
    progress(str_cat("merge-ckpt: wrote rank ", r, " of ", world));
  }
  log::end_status();
  write_manifest(temp.string(), CheckpointManifest{world, index.step, index.run_id, digests});
  const std::string config_text = config::to_json_text(config);
  formats::write_file_atomic((temp / "config.json").string(), config_text.data(),
                             config_text.size());
  temp_dir.publish("resharded checkpoint");
  summary.outputs.push_back((target / "manifest.json").string());
  summary.outputs.push_back((target / "config.json").string());
  return summary;
}

}  // namespace

std::vector<std::string> match_checkpoint_files(const std::string& pattern) {
  glob_t found{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &found);
  std::vector<std::string> files;
  if (rc == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
  }
  ::globfree(&found);
  PSTAR_CHECK(rc == 0 || rc == GLOB_NOMATCH, IoError, "--pattern '", pattern,
              "': cannot read the directories it names");
  PSTAR_CHECK(!files.empty(), IoError, "--pattern '", pattern,
              "' matches no file; give the checkpoint files, e.g. 'ck/step-00000100/ckpt-*.pt' "
              "(quoted, so the shell leaves the * to pstar)");
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> checkpoint_files_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && rank_from_file_name(entry.path().string()))
      files.push_back(entry.path().string());
  }
  PSTAR_CHECK(!ec, IoError, "--dir ", dir, ": cannot list it: ", ec.message());
  PSTAR_CHECK(!files.empty(), IoError, "--dir ", dir,
              " holds no ckpt-<rank>.pt file; give a checkpoint step directory, e.g. "
              "ck/step-00000100");
  std::sort(files.begin(), files.end());
  return files;
}

CheckpointIndex index_checkpoint(const std::vector<std::string>& files, int64_t expected_ranks,
                                 const IndexOptions& options) {
  PSTAR_CHECK(expected_ranks >= 1, ConfigError, "--num ", expected_ranks,
              ": expected the number of ranks (files), at least 1");
  if (static_cast<int64_t>(files.size()) != expected_ranks) {
    // Name the ranks whose ckpt-<rank>.pt did not match, where the names tell.
    std::set<int64_t> named;
    for (const auto& f : files)
      if (auto r = rank_from_file_name(f)) named.insert(*r);
    std::string missing;
    for (int64_t r = 0; r < expected_ranks && files.size() < static_cast<size_t>(expected_ranks);
         ++r) {
      if (!named.count(r)) missing += str_cat(missing.empty() ? "" : ", ", "ckpt-", r, ".pt");
    }
    PSTAR_THROW(ConfigError, "--num ", expected_ranks, " but ", files.size(),
                " checkpoint file(s) matched (", file_list(files), ")",
                missing.empty() ? std::string() : str_cat("; missing: ", missing),
                "; give one file per rank of the run");
  }

  CheckpointIndex index;
  index.world_size = expected_ranks;
  index.files.assign(files.size(), "");
  index.run_state.resize(files.size());

  // The manifests of the directories the files are in: they must agree with --num and each other.
  std::map<std::string, CheckpointManifest> manifests;
  std::string run_id_dir;
  for (const auto& f : files) {
    const std::string dir = fs::path(f).parent_path().string();
    if (manifests.count(dir)) continue;
    const bool has_manifest = fs::exists(fs::path(dir.empty() ? "." : dir) / "manifest.json");
    if (!has_manifest) continue;
    check_manifest_version(dir.empty() ? "." : dir);
    const CheckpointManifest m = read_manifest(dir.empty() ? "." : dir);
    const std::string path = (fs::path(dir) / "manifest.json").string();
    PSTAR_CHECK(m.world_size == expected_ranks, ConfigError, path,
                ": the checkpoint was written by ", m.world_size, " rank(s), but --num is ",
                expected_ranks, "; give --num ", m.world_size, " and all its files");
    if (!manifests.empty()) {
      const auto& [other_dir, other] = *manifests.begin();
      PSTAR_CHECK(m.run_id == other.run_id && m.step == other.step, FormatError, path,
                  " describes run ", m.run_id, " at step ", m.step, " but ",
                  (fs::path(other_dir) / "manifest.json").string(), " run ", other.run_id,
                  " at step ", other.step, "; all files must come from one checkpoint");
    }
    manifests.emplace(dir, m);
  }
  // Note [merge checks]
  // Every file is checked against the size and CRC-32 its checkpoint's manifest.json records
  // before it is parsed, so that flipped bytes inside a tensor (which leave the archive readable)
  // are refused rather than merged into a model, and a file of another step or run is refused
  // before anything is read from it. A file no manifest vouches for is merged only when asked
  // (--unverified); the checks of pass 1 below still apply to it.
  std::vector<std::string> unverified;
  for (const auto& f : options.verify ? files : std::vector<std::string>{}) {
    const std::string dir = fs::path(f).parent_path().string();
    auto m = manifests.find(dir);
    const auto rank = rank_from_file_name(f);
    if (m != manifests.end() && !m->second.digests.empty() && rank &&
        *rank < m->second.world_size) {
      const std::string problem = checkpoint_file_problem(dir, m->second, *rank);
      PSTAR_CHECK(problem.empty(), FormatError, problem, "; nothing was merged");
      continue;
    }
    const fs::path manifest_path = fs::path(dir.empty() ? "." : dir) / "manifest.json";
    unverified.push_back(
        str_cat(f, m == manifests.end() ? str_cat(" (", manifest_path.string(), " is missing)")
                   : m->second.digests.empty()
                       ? str_cat(" (", manifest_path.string(), " was written before checksums)")
                       : str_cat(" (not one of the ckpt-<rank>.pt files ", manifest_path.string(),
                                 " lists)")));
  }
  if (!unverified.empty()) {
    PSTAR_CHECK(options.allow_unverified, ConfigError, "no manifest.json vouches for ",
                file_list(unverified, 2),
                ", so nothing can check their sizes and CRC-32s; merge the "
                "checkpoint's own files (a step directory written by pstar train), or give "
                "--unverified to merge them unchecked");
    log::warn("merge-ckpt: ", unverified.size(),
              " file(s) merged without a checksum (--unverified): ", file_list(unverified, 2));
  }
  if (!manifests.empty()) {
    index.run_id = manifests.begin()->second.run_id;
    index.step = manifests.begin()->second.step;
  }
  // The run's config, where all files lie in one step directory with it.
  const fs::path dir = fs::path(files[0]).parent_path();
  bool one_dir = true;
  for (const auto& f : files) one_dir = one_dir && fs::path(f).parent_path() == dir;
  if (one_dir && fs::is_regular_file(dir / "config.json"))
    index.config_path = (dir / "config.json").string();

  // Pass 1 (Note [merge passes]): each file once, keeping only names, shapes and run state.
  std::map<std::string, int64_t> holder;  // parameter -> rank
  std::optional<int64_t> step = manifests.empty() ? std::nullopt : std::optional(index.step);
  std::string step_file = manifests.empty()
                              ? std::string()
                              : (fs::path(manifests.begin()->first) / "manifest.json").string();
  for (const auto& file : files) {
    const TensorMap tensors = read_one_file(file);
    const int64_t version = required_run_scalar(tensors, ckpt::kFormatVersionKey, file);
    PSTAR_CHECK(version == kFormatVersion, FormatError, file, ": checkpoint format version ",
                version, " is not supported by this pstar (expected ", kFormatVersion, ")");
    const auto named = rank_from_file_name(file);
    const auto inside = run_scalar(tensors, ckpt::kRank, file);
    PSTAR_CHECK(inside || named, FormatError, file,
                ": holds no '__pstar__.rank' and its name is not ckpt-<rank>.pt; cannot tell "
                "which rank wrote it");
    const int64_t rank = inside ? *inside : *named;
    PSTAR_CHECK(!inside || !named || *inside == *named, FormatError, file, ": written by rank ",
                *inside, " (__pstar__.rank) but named for rank ", named.value_or(-1),
                "; was it renamed? ckpt-<rank>.pt must hold that rank's tensors");
    PSTAR_CHECK(rank >= 0 && rank < expected_ranks, FormatError, file, ": written by rank ", rank,
                ", outside 0..", expected_ranks - 1, " for --num ", expected_ranks);
    const std::string& previous = index.files[static_cast<size_t>(rank)];
    PSTAR_CHECK(previous.empty(), FormatError, file, " and ", previous, " both hold rank ", rank,
                "; give each rank's file once");
    if (const auto world = run_scalar(tensors, ckpt::kWorldSize, file)) {
      PSTAR_CHECK(*world == expected_ranks, ConfigError, file, ": written by rank ", rank, " of ",
                  *world, ", but --num is ", expected_ranks, "; give --num ", *world,
                  " and all its files");
    }
    const int64_t file_step = required_run_scalar(tensors, ckpt::kStep, file);
    PSTAR_CHECK(!step || *step == file_step, FormatError, file, ": at step ", file_step, " but ",
                step_file, " is at step ", *step,
                "; all files must come from one checkpoint of one run");
    if (!step) {
      step = file_step;
      step_file = file;
    }
    index.files[static_cast<size_t>(rank)] = file;

    int64_t bytes = 0;
    for (const auto& [name, t] : tensors) {
      bytes += tensor_bytes(t);
      if (starts_with(name, kRunStatePrefix)) {
        index.run_state[static_cast<size_t>(rank)].emplace(name, t.clone());
        continue;
      }
      if (!is_parameter(tensors, name)) continue;
      PSTAR_CHECK(t.is_floating_point(), FormatError, file, ": tensor '", name, "' has dtype ",
                  t.scalar_type(), "; parameters are floating point");
      auto [it, fresh] = holder.emplace(name, rank);
      PSTAR_CHECK(fresh, FormatError, file, ": tensor '", name, "' is also in ",
                  index.files[static_cast<size_t>(it->second)],
                  "; each parameter belongs to one rank, so these files are not one checkpoint");
      index.params.push_back(ShardParameter{name, t.sizes().vec(), t.scalar_type(), rank});
      index.param_bytes += tensor_bytes(t);
    }
    index.largest_file_tensor_bytes = std::max(index.largest_file_tensor_bytes, bytes);
    progress(str_cat(options.label, ": checked ", file, " (rank ", rank, ", ", format_bytes(bytes),
                     ")"));
  }
  log::end_status();
  index.step = *step;
  std::stable_sort(index.params.begin(), index.params.end(), [](const auto& a, const auto& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.name < b.name;
  });

  // Files of different runs at the same step: the run's counters, equal on every rank, differ.
  for (const char* name : {ckpt::kTokens, ckpt::kAdamStep, ckpt::kSkippedSteps}) {
    const auto& state0 = index.run_state[0];
    auto a = state0.find(name);
    for (size_t r = 1; r < files.size() && a != state0.end(); ++r) {
      auto b = index.run_state[r].find(name);
      PSTAR_CHECK(b != index.run_state[r].end() && b->second.equal(a->second), FormatError,
                  index.files[r], ": '", name, "' differs from ", index.files[0],
                  "'s; every rank of one run has the same, so these files come from different "
                  "runs");
    }
  }
  return index;
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
    output_kind(o);
    PSTAR_CHECK(!fs::is_directory(o.output), ConfigError, "-o ", o.output,
                ": is a directory; give a file name");
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
    return write_resharded(index, o, *config);
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
  } else if (auto config = gpt_config_of(index, index.config_path, &why)) {
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

TensorList resharded_rank_tensors(const CheckpointIndex& index, const config::TrainConfig& config,
                                  int64_t world, int64_t rank) {
  PSTAR_INTERNAL_ASSERT(!index.files.empty() && index.run_state.size() == index.files.size());
  PSTAR_INTERNAL_ASSERT(rank >= 0 && rank < world, "rank ", rank, " of ", world);
  const std::map<std::string, int64_t> owner = new_owners(config, world, "--nproc");
  return rank_tensors(index, owner, world, rank, nullptr);
}

}  // namespace pstar::train
