// Joining the per-rank checkpoint files of a run (`pstar merge-ckpt`, docs/cli.md): into one file
// of the model's parameters (safetensors or a pickled dict, loadable as `model.init_from` or by
// Python's torch.load), or into a checkpoint for another number of ranks (`--reshard`).
//
// Note [merge passes]
// Nothing is written before every file has been read and checked, and no more than one input
// file's tensors are held at once (plus, for .pt and resharded output, what that one output file
// holds, because LibTorch's pickle writer needs all of a file's tensors). So each input file is
// read twice: once to check it and learn its tensors' names and shapes (the index), and once to
// copy its parameters into the output. A safetensors output is written in place, tensor by tensor
// at the offsets its header fixes (formats::SafetensorsStreamWriter). Before each file is read
// the previous one's memory is handed back to the system (malloc_trim), which glibc would
// otherwise keep resident. Every output file appears atomically, or not at all.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "pstar/formats/config.h"
#include "pstar/train/checkpoint.h"

namespace pstar::train {

// One parameter of a checkpoint, as the index knows it (no data).
struct ShardParameter {
  std::string name;
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t rank = 0;  // the file that holds it (and its Adam state)
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
// parameter in two files. With a config.json that describes a GPT, the parameters must be
// exactly that model's. FormatError, or ConfigError for a wrong count or files no manifest
// vouches for, naming the file and what is wrong.
CheckpointIndex index_checkpoint(const std::vector<std::string>& files, int64_t expected_ranks,
                                 const IndexOptions& options = {});

enum class MergeDType { kFp32, kBf16, kFp16 };

struct MergeOptions {
  // A .safetensors or .pt file; with `reshard`, a step directory to create.
  std::string output;
  MergeDType dtype = MergeDType::kFp32;
  // > 0: write a checkpoint for this many ranks (ckpt-<r>.pt, manifest.json, config.json) that
  // `pstar train --resume OUTPUT --nproc M` continues.
  int64_t reshard = 0;
  // With `reshard`: the training config whose chunk layout the new ranks will have; empty: the
  // checkpoint's own config.json.
  std::string config_path;
  // The output is the default one beside the checkpoint's files (merge-ckpt without -o): where
  // the checkpoint's own config.json lies, none is written beside it (that one is the run's),
  // instead of refusing the output.
  bool beside_checkpoint = false;
};

struct MergeSummary {
  std::vector<std::string> outputs;  // the files written
  int64_t tensors = 0;               // tensors written (parameters; with reshard also Adam state)
  int64_t bytes = 0;                 // their bytes
  int64_t peak_held_bytes = 0;       // the most tensor bytes held at once (Note [merge passes])
};

// The options alone, before any file is read: the output kind (from -o's extension), and for
// --reshard that -o does not exist yet. ConfigError.
void check_merge_options(const MergeOptions& options);

// Checks the options and writes the output from an index, creating -o's missing parent
// directories. Throws as index_checkpoint does, ConfigError for bad options, IoError when the
// output cannot be written; no output file is left behind then.
MergeSummary merge_checkpoint(const CheckpointIndex& index, const MergeOptions& options);

// What rank `rank` of `world` holds in the checkpoint `index` resharded for `world` ranks, the
// chunks laid out as `config` (a GPT) lays them out (Note [reshard] in merge.cpp): its parameters
// with their Adam state, read from the files that hold them, and the run state. The tensors
// `--reshard` writes to that rank's file; `pstar train --resume` on another number of ranks
// loads them straight away. ConfigError when `config` has fewer chunks than `world` ranks or
// describes no GPT; FormatError when a file lacks what a rank needs.
TensorList resharded_rank_tensors(const CheckpointIndex& index, const config::TrainConfig& config,
                                  int64_t world, int64_t rank);

}  // namespace pstar::train
