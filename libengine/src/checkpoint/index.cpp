#include "pstar/checkpoint/index.h"

#include <glob.h>

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
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "pstar/core/log.h"
#include "shard_io.h"

namespace pstar::checkpoint {

namespace fs = std::filesystem;
using internal::progress;
using internal::read_one_file;
using internal::tensor_bytes;
using nlohmann::json;

namespace {

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
  for (const char* suffix : {kExpAvg, kExpAvgSq}) {
    if (ends_with(name, suffix) &&
        tensors.count(name.substr(0, name.size() - std::strlen(suffix))) > 0)
      return true;
  }
  return false;
}

bool is_parameter(const TensorMap& tensors, const std::string& name) {
  return !starts_with(name, kRunPrefix) && !is_adam_state(tensors, name);
}

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

// The shape a file records for the split parameter `name` (Note [checkpoint pieces]).
std::vector<int64_t> recorded_shape(const TensorMap& tensors, const std::string& name,
                                    const std::string& file) {
  auto it = tensors.find(shape_name(name));
  PSTAR_CHECK(it != tensors.end(), FormatError, file, ": holds pieces of '", name,
              "' but not its shape ('", shape_name(name), "'); was it written by pstar train?");
  const at::Tensor& t = it->second;
  PSTAR_CHECK(t.dim() == 1 && t.scalar_type() == torch::kInt64, FormatError, file, ": '",
              shape_name(name), "' should be a 1-D int64 shape, but it is ", t.scalar_type(),
              " of shape ", t.sizes());
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

int64_t ShardParameter::numel() const { return product(shape); }

int64_t ShardParameter::last_rank() const {
  int64_t last = rank;
  for (const ShardPiece& piece : pieces) last = std::max(last, piece.rank);
  return last;
}

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
  // Note [checkpoint pieces]: the pieces of split modules' tensors, joined once every file is read.
  std::map<std::string, ShardParameter> split;
  std::optional<int64_t> step = manifests.empty() ? std::nullopt : std::optional(index.step);
  std::string step_file = manifests.empty()
                              ? std::string()
                              : (fs::path(manifests.begin()->first) / "manifest.json").string();
  for (const auto& file : files) {
    const TensorMap tensors = read_one_file(file);
    const int64_t version = required_run_scalar(tensors, kFormatVersionKey, file);
    PSTAR_CHECK(version == kFormatVersion, FormatError, file, ": checkpoint format version ",
                version, " is not supported by this pstar (expected ", kFormatVersion, ")");
    const auto named = rank_from_file_name(file);
    const auto inside = run_scalar(tensors, kRank, file);
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
    if (const auto world = run_scalar(tensors, kWorldSize, file)) {
      PSTAR_CHECK(*world == expected_ranks, ConfigError, file, ": written by rank ", rank, " of ",
                  *world, ", but --num is ", expected_ranks, "; give --num ", *world,
                  " and all its files");
    }
    const int64_t file_step = required_run_scalar(tensors, kStep, file);
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
      if (starts_with(name, kRunPrefix)) {
        index.run_state[static_cast<size_t>(rank)].emplace(name, t.clone());
        continue;
      }
      if (!is_parameter(tensors, name)) continue;
      PSTAR_CHECK(t.is_floating_point(), FormatError, file, ": tensor '", name, "' has dtype ",
                  t.scalar_type(), "; parameters are floating point");
      if (const auto piece = parse_piece_name(name)) {
        PSTAR_CHECK(t.dim() == 1, FormatError, file, ": piece '", name,
                    "' should be 1-D, but it has shape ", t.sizes());
        ShardParameter& p = split[piece->first];
        const std::vector<int64_t> shape = recorded_shape(tensors, piece->first, file);
        PSTAR_CHECK(p.pieces.empty() || (p.shape == shape && p.dtype == t.scalar_type()),
                    FormatError, file, ": piece '", name, "' (", t.scalar_type(),
                    ") of a tensor of shape ", c10::IntArrayRef(shape), " disagrees with ",
                    index.files[static_cast<size_t>(p.pieces.front().rank)], "'s pieces (", p.dtype,
                    ", ", c10::IntArrayRef(p.shape), ")");
        p.name = piece->first;
        p.shape = shape;
        p.dtype = t.scalar_type();
        p.pieces.push_back(ShardPiece{rank, name, piece->second, t.numel()});
        index.param_bytes += tensor_bytes(t);
        continue;
      }
      auto [it, fresh] = holder.emplace(name, rank);
      PSTAR_CHECK(fresh, FormatError, file, ": tensor '", name, "' is also in ",
                  index.files[static_cast<size_t>(it->second)],
                  "; each parameter belongs to one rank, so these files are not one checkpoint");
      index.params.push_back(ShardParameter{
          name, t.sizes().vec(), t.scalar_type(), rank, {ShardPiece{rank, name, 0, t.numel()}}});
      index.param_bytes += tensor_bytes(t);
    }
    index.largest_file_tensor_bytes = std::max(index.largest_file_tensor_bytes, bytes);
    progress(str_cat(options.label, ": checked ", file, " (rank ", rank, ", ", format_bytes(bytes),
                     ")"));
  }
  log::end_status();
  index.step = *step;
  for (auto& [name, p] : split) {
    std::sort(p.pieces.begin(), p.pieces.end(),
              [](const ShardPiece& a, const ShardPiece& b) { return a.begin < b.begin; });
    const std::string& first = index.files[static_cast<size_t>(p.pieces.front().rank)];
    const auto whole = holder.find(name);
    PSTAR_CHECK(whole == holder.end(), FormatError, first, ": holds pieces of '", name, "', which ",
                index.files[static_cast<size_t>(whole == holder.end() ? 0 : whole->second)],
                " holds whole; these files are not one checkpoint");
    int64_t at = 0;
    for (const ShardPiece& piece : p.pieces) {
      PSTAR_CHECK(piece.begin == at, FormatError, index.files[static_cast<size_t>(piece.rank)],
                  ": piece '", piece.stored, "' starts at element ", piece.begin, " of '", name,
                  "' but the pieces before it end at ", at,
                  piece.begin > at ? "; a piece is missing" : "; two pieces overlap");
      at += piece.numel;
    }
    PSTAR_CHECK(at == p.numel(), FormatError, first, ": the pieces of '", name, "' hold ", at,
                " of its ", p.numel(), " elements; a piece is missing");
    p.rank = p.pieces.front().rank;
    index.params.push_back(std::move(p));
  }
  std::stable_sort(index.params.begin(), index.params.end(), [](const auto& a, const auto& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.name < b.name;
  });

  // Files of different runs at the same step: the run's counters, equal on every rank, differ.
  for (const char* name : {kTokens, kAdamStep, kSkippedSteps}) {
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

}  // namespace pstar::checkpoint
