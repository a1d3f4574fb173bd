#include "pstar/checkpoint/reshard.h"

#include <algorithm>
#include <array>
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

// Where each parameter lies on `world` new ranks (Note [reshard]): the rank that owns it, or for a
// tensor of a split module (Note [split modules] in pstar/plan/chunk_layout.h) its offset into the
// module's span and the parts' size, each rank keeping its piece.
struct NewHome {
  int64_t owner = 0;
  bool split = false;
  int64_t offset = 0, part_size = 0;
};

// ConfigError if there are fewer chunks than ranks.
std::map<std::string, NewHome> new_homes(const config::TrainConfig& config, int64_t world,
                                         const char* what) {
  const plan::ModelChunkMap map = plan::model_chunk_map(config, world);
  PSTAR_CHECK(map.layout.num_chunks >= world, ConfigError, what, " ", world, ": the model fits in ",
              map.layout.num_chunks, " chunk(s) of ", map.layout.chunk_size,
              " elements, fewer than the ", world,
              " ranks that would each own one; use fewer ranks or lower default_chunk_size in the "
              "config");
  std::map<std::string, NewHome> homes;
  for (size_t i = 0; i < map.params.size(); ++i) {
    NewHome home;
    home.owner = map.chunks[i] % world;
    if (map.split(i)) {
      home.split = true;
      home.offset = map.offsets[i];
      home.part_size = map.layout.size_of(map.chunks[i]);
    }
    homes.emplace(map.params[i].name, home);
  }
  return homes;
}

// One tensor new rank r keeps (with its two Adam moments): elements [begin, end) of parameter p,
// stored as `stored` of shape `shape`, gathered from whichever old files hold them.
struct Wanted {
  const ShardParameter* p = nullptr;
  std::string stored;
  int64_t begin = 0, end = 0;
  std::vector<int64_t> shape;
  std::array<at::Tensor, 3> values;  // the parameter, exp_avg, exp_avg_sq
};

// The tensors new rank `r` of `world` holds (Note [reshard]): each file that holds any of their
// elements is read once, and the elements are copied where old and new pieces overlap (a whole
// tensor kept whole is taken as it is).
TensorList rank_tensors(const CheckpointIndex& index, const std::map<std::string, NewHome>& homes,
                        int64_t world, int64_t r, int64_t* peak_held_bytes) {
  const auto& first = index.run_state[0];
  std::vector<Wanted> wanted;
  TensorList out;
  for (const auto& p : index.params) {
    auto it = homes.find(p.name);
    PSTAR_CHECK(it != homes.end(), FormatError, index.files[static_cast<size_t>(p.rank)],
                ": tensor '", p.name, "' is not a parameter of the model the config describes");
    const NewHome& home = it->second;
    if (!home.split) {
      if (home.owner == r) wanted.push_back(Wanted{&p, p.name, 0, p.numel(), p.shape, {}});
      continue;
    }
    const plan::PieceRange range = plan::piece_in_part(home.offset, p.numel(), r, home.part_size);
    if (range.empty()) continue;
    wanted.push_back(
        Wanted{&p, piece_name(p.name, range.begin), range.begin, range.end, {range.numel()}, {}});
    out.emplace_back(shape_name(p.name), torch::tensor(p.shape, torch::kInt64));
  }
  std::set<int64_t> sources;
  for (const Wanted& w : wanted)
    for (const ShardPiece& q : w.p->pieces)
      if (q.begin < w.end && q.begin + q.numel > w.begin) sources.insert(q.rank);
  int64_t kept_bytes = 0;
  for (int64_t s : sources) {
    const std::string& file = index.files[static_cast<size_t>(s)];
    const TensorMap tensors = read_one_file(file);
    int64_t held = 0;
    for (const auto& [name, t] : tensors) held += tensor_bytes(t);
    for (Wanted& w : wanted) {
      for (const ShardPiece& q : w.p->pieces) {
        const int64_t lo = std::max(w.begin, q.begin), hi = std::min(w.end, q.begin + q.numel);
        if (q.rank != s || lo >= hi) continue;
        if (!w.p->in_pieces() && w.stored == w.p->name) {
          // Whole before and after: the file's tensors themselves.
          w.values[0] = indexed_tensor(tensors, *w.p, file);
          w.values[1] =
              checkpoint_tensor(tensors, exp_avg_of(q.stored), file, w.shape, torch::kFloat32);
          w.values[2] =
              checkpoint_tensor(tensors, exp_avg_sq_of(q.stored), file, w.shape, torch::kFloat32);
          for (const at::Tensor& v : w.values) kept_bytes += tensor_bytes(v);
          continue;
        }
        const std::array<at::Tensor, 3> from = {
            q.stored == w.p->name ? indexed_tensor(tensors, *w.p, file).reshape({-1})
                                  : internal::indexed_piece(tensors, *w.p, q, file),
            checkpoint_tensor(tensors, exp_avg_of(q.stored), file,
                              q.stored == w.p->name ? w.p->shape : std::vector<int64_t>{q.numel},
                              torch::kFloat32)
                .reshape({-1}),
            checkpoint_tensor(tensors, exp_avg_sq_of(q.stored), file,
                              q.stored == w.p->name ? w.p->shape : std::vector<int64_t>{q.numel},
                              torch::kFloat32)
                .reshape({-1})};
        for (size_t i = 0; i < 3; ++i) {
          if (!w.values[i].defined()) {
            w.values[i] = torch::empty({w.end - w.begin},
                                       torch::dtype(i == 0 ? w.p->dtype : torch::kFloat32));
            kept_bytes += tensor_bytes(w.values[i]);
          }
          w.values[i]
              .slice(0, lo - w.begin, hi - w.begin)
              .copy_(from[i].slice(0, lo - q.begin, hi - q.begin));
        }
      }
    }
    // This file's tensors, and what the output keeps of the files before it.
    if (peak_held_bytes != nullptr)
      *peak_held_bytes = std::max(*peak_held_bytes, held + kept_bytes);
  }
  for (Wanted& w : wanted) {
    out.emplace_back(w.stored, w.values[0].view(w.shape));
    out.emplace_back(exp_avg_of(w.stored), w.values[1].view(w.shape));
    out.emplace_back(exp_avg_sq_of(w.stored), w.values[2].view(w.shape));
  }
  for (const char* name :
       {kFormatVersionKey, kStep, kTokens, kSkippedSteps, kLossScaler, kAdamStep}) {
    const std::string key = name;
    auto it = first.find(key);
    PSTAR_CHECK(it != first.end(), FormatError, index.files[0], ": tensor '", key,
                "' is missing; a resumable checkpoint needs it");
    out.emplace_back(key, it->second);
  }
  // Note [held parameters]: the updates each parameter missed, the same on every rank.
  for (const auto& [key, value] : first)
    if (starts_with(key, kAdamMissedPrefix)) out.emplace_back(key, value);
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
// chunk engine registers them, independent of the number of ranks. A tensor of a split module
// lies in pieces across the ranks (Note [checkpoint pieces]), on the old layout or the new one:
// new rank r takes the elements its layout gives it, whole or as its piece, from whichever old
// files hold them, each file read once. The run's counters, loss
// scaler and Adam step are the same on every rank and are copied from rank 0's file. The random
// state is per rank: new rank r takes old rank r's where there was one, else rank 0's. (pstar's
// GPT draws no random numbers while training, so this changes no result; a reshard to the same
// number of ranks resumes bit-identically.) `merge-ckpt --reshard` writes these tensors to files;
// `pstar train --resume` on another number of ranks loads them directly (resharded_rank_tensors),
// so the two continue the run identically.
MergeSummary internal::write_resharded(const CheckpointIndex& index, const MergeOptions& o,
                                       const config::TrainConfig& config) {
  const int64_t world = o.reshard;
  const std::map<std::string, NewHome> homes = new_homes(config, world, "--reshard");

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
    const TensorList out = rank_tensors(index, homes, world, r, &summary.peak_held_bytes);
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
  const std::map<std::string, NewHome> homes = new_homes(config, world, "--nproc");
  return rank_tensors(index, homes, world, rank, nullptr);
}

}  // namespace pstar::checkpoint
