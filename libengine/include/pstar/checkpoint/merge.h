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
#include <functional>
#include <string>
#include <vector>

#include "pstar/checkpoint/index.h"

namespace pstar::checkpoint {

enum class MergeDType { kFp32, kBf16, kFp16 };

struct MergeOptions {
  // A .safetensors or .pt file; a name without either extension: a Hugging Face model folder
  // (config.json + model.safetensors, or shards and an index); with `reshard`, a step directory
  // to create.
  std::string output;
  MergeDType dtype = MergeDType::kFp32;
  // A Hugging Face folder's shard size limit, in bytes of tensor data.
  uint64_t max_shard_bytes = 5'000'000'000ULL;
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

// Note [merge passes]' second pass alone: every parameter of the indexed checkpoint, whole (a
// split one joined), as a contiguous tensor in `dtype`, handed to `write` by name, one input file
// at a time. What `pstar generate` loads a checkpoint of any number of ranks through, writing no
// merged copy.
void read_checkpoint_parameters(
    const CheckpointIndex& index, c10::ScalarType dtype,
    const std::function<void(const std::string&, const at::Tensor&)>& write);

// Checks the options and writes the output from an index, creating -o's missing parent
// directories. Throws as index_checkpoint does, ConfigError for bad options, IoError when the
// output cannot be written; no output file is left behind then.
MergeSummary merge_checkpoint(const CheckpointIndex& index, const MergeOptions& options);

}  // namespace pstar::checkpoint
