// The per-rank files of one checkpoint, checked as a set and indexed (names, shapes, who holds
// what, the run state) without keeping their tensors: the first pass of merging and resharding
// (Note [merge passes] in merge.h), and what a resume on another number of ranks reads
// (Note [resume resharding] in run_checkpoint.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace pstar::checkpoint {

// Where one stored tensor of a parameter lies (Note [checkpoint pieces] in schema.h): elements
// [begin, begin + numel) of the parameter flattened, as tensor `stored` (with its Adam state under
// the moment suffixes) of rank `rank`'s file.
struct ShardPiece {
  int64_t rank = 0;
  std::string stored;
  int64_t begin = 0, numel = 0;
};

// One parameter of a checkpoint, as the index knows it (no data).
struct ShardParameter {
  std::string name;
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t rank = 0;  // the file that holds it (and its Adam state); its first piece's
  // Its stored tensors, in order: the whole parameter under its name, or the pieces of a split
  // module's tensor, which cover it once.
  std::vector<ShardPiece> pieces;
  bool in_pieces() const { return pieces.size() != 1 || pieces.front().stored != name; }
  // The file after whose reading every piece is in: the last rank holding one.
  int64_t last_rank() const;
  int64_t numel() const;
};

// A complete, consistent set of one checkpoint's files, learnt by reading each once.
struct CheckpointIndex {
  std::vector<std::string> files;  // by rank
  int64_t world_size = 0;
  int64_t step = -1;
  std::string run_id;                  // from manifest.json; empty when there is none
  std::string config_path;             // the step directory's config.json; empty when there is none
  std::vector<ShardParameter> params;  // by rank, then by name
  int64_t param_bytes = 0;             // the parameters' bytes as stored (fp32)
  int64_t largest_file_tensor_bytes = 0;  // one file's tensors, Adam state included
  // Each file's `__pstar__.*` tensors (counters, loss scaler, random state), by rank.
  std::vector<std::map<std::string, at::Tensor>> run_state;
};

// The files a shell pattern (glob) matches, sorted. IoError when none does.
std::vector<std::string> match_checkpoint_files(const std::string& pattern);

// The ckpt-<rank>.pt files of a step directory, sorted. IoError when there are none.
std::vector<std::string> checkpoint_files_in(const std::string& dir);

// How index_checkpoint trusts the files (Note [merge checks]).
struct IndexOptions {
  // Check each file's size and CRC-32 against its directory's manifest.json before parsing it,
  // and refuse files no manifest vouches for (unless allow_unverified). Off only where the caller
  // has just checked them as it accepts them (a resume that reshards).
  bool verify = true;
  // Also take files no manifest vouches for (no manifest.json, one from pstar before checksums,
  // or a file it does not list), unchecked: `merge-ckpt --unverified`. Files a manifest covers
  // are checked all the same.
  bool allow_unverified = false;
  // Names the work in progress lines ("merge-ckpt: checked ...").
  std::string label = "merge-ckpt";
};

// Reads each file once and checks that together they are one checkpoint of `expected_ranks`
// ranks: each file intact by its manifest (IndexOptions), as many files (and as manifest.json
// says, where there is one), each rank 0..N-1 once (by `__pstar__.rank`, else the file name
// ckpt-<rank>.pt), one format version this pstar reads, the same step, world size and run, no
// parameter in two files but the pieces of a split module's tensor, which must cover it exactly
// once. With a config.json that describes a GPT, the parameters must be
// exactly that model's. FormatError, or ConfigError for a wrong count or files no manifest
// vouches for, naming the file and what is wrong.
CheckpointIndex index_checkpoint(const std::vector<std::string>& files, int64_t expected_ranks,
                                 const IndexOptions& options = {});

}  // namespace pstar::checkpoint
