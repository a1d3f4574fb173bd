#include "pstar/checkpoint/reshard.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/formats/file_guard.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/plan/memory_plan.h"
#include "shard_io.h"

namespace pstar::checkpoint {

namespace fs = std::filesystem;
using internal::indexed_tensor;
using internal::progress;
using internal::read_one_file;
using internal::tensor_bytes;

namespace {

// Which new rank owns each parameter (Note [reshard]); ConfigError if there are fewer chunks
// than ranks.
std::map<std::string, int64_t> new_owners(const config::TrainConfig& config, int64_t world,
                                          const char* what) {
  const plan::ModelChunkMap map = plan::model_chunk_map(config, world);
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
      for (const char* suffix : {kExpAvg, kExpAvgSq}) {
        const std::string name = p.name + suffix;
        out.emplace_back(name, checkpoint_tensor(tensors, name, file, p.shape, torch::kFloat32));
      }
    }
    // This file's tensors, and what the output keeps of the files before it.
    if (peak_held_bytes != nullptr)
      *peak_held_bytes = std::max(*peak_held_bytes, held + kept_bytes);
    for (size_t i = first_from_file; i < out.size(); ++i) kept_bytes += tensor_bytes(out[i].second);
  }
  for (const char* name :
       {kFormatVersionKey, kStep, kTokens, kSkippedSteps, kLossScaler, kAdamStep}) {
    const std::string key = name;
    auto it = first.find(key);
    PSTAR_CHECK(it != first.end(), FormatError, index.files[0], ": tensor '", key,
                "' is missing; a resumable checkpoint needs it");
    out.emplace_back(key, it->second);
  }
  const size_t rng_rank = r < index.world_size ? static_cast<size_t>(r) : 0;
  const auto& rng_source = index.run_state[rng_rank];
  auto rng = rng_source.find(kRng);
  PSTAR_CHECK(rng != rng_source.end(), FormatError, index.files[rng_rank],
              ": tensor '__pstar__.rng' is missing; a resumable checkpoint needs it");
  out.emplace_back(rng->first, rng->second);
  out.emplace_back(kRank, torch::tensor(r, torch::kInt64));
  out.emplace_back(kWorldSize, torch::tensor(world, torch::kInt64));
  return out;
}

}  // namespace

// Note [reshard]
// A checkpoint for M ranks holds in ckpt-<r>.pt the parameters (and their Adam state) of the
// chunks rank r owns: chunk k belongs to rank k % M, and which chunk a parameter lands in follows
// from the model's shape and the chunk keys of the config (plan::model_chunk_map), exactly as the
// chunk engine registers them, independent of the number of ranks. The run's counters, loss
// scaler and Adam step are the same on every rank and are copied from rank 0's file. The random
// state is per rank: new rank r takes old rank r's where there was one, else rank 0's. (pstar's
// GPT draws no random numbers while training, so this changes no result; a reshard to the same
// number of ranks resumes bit-identically.) `merge-ckpt --reshard` writes these tensors to files;
// `pstar train --resume` on another number of ranks loads them directly (resharded_rank_tensors),
// so the two continue the run identically.
MergeSummary internal::write_resharded(const CheckpointIndex& index, const MergeOptions& o,
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
      if (starts_with(name, kRunPrefix)) continue;
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

TensorList resharded_rank_tensors(const CheckpointIndex& index, const config::TrainConfig& config,
                                  int64_t world, int64_t rank) {
  PSTAR_INTERNAL_ASSERT(!index.files.empty() && index.run_state.size() == index.files.size());
  PSTAR_INTERNAL_ASSERT(rank >= 0 && rank < world, "rank ", rank, " of ", world);
  const std::map<std::string, int64_t> owner = new_owners(config, world, "--nproc");
  return rank_tensors(index, owner, world, rank, nullptr);
}

}  // namespace pstar::checkpoint
