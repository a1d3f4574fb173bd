// Checkpoint files: one per rank, `ckpt-<rank>.pt`, a pickled dict of name -> tensor that Python's
// torch.load reads as a dict. Parameters appear under their own names (fp32 master values), their
// Adam state as `<name>.exp_avg` / `<name>.exp_avg_sq`, and the run's state under `__pstar__.*`.
// A checkpoint directory is `<save_dir>/step-<N>/`; `<save_dir>/latest` names the newest complete
// one and is replaced (atomically) only after every file of it is written.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace pstar::train {

using TensorList = std::vector<std::pair<std::string, at::Tensor>>;
using TensorMap = std::map<std::string, at::Tensor>;

// Atomic: a temporary file, fsync, rename. IoError naming the path on failure.
void write_checkpoint_file(const std::string& path, const TensorList& tensors);

// FormatError naming the file when it is truncated, corrupt or not a dict of tensors; IoError
// when unreadable.
TensorMap read_checkpoint_file(const std::string& path);

// The tensor `name` of a checkpoint, checked against the shape and dtype the run needs;
// FormatError naming the file and the tensor otherwise.
const at::Tensor& checkpoint_tensor(const TensorMap& tensors, const std::string& name,
                                    const std::string& file, c10::IntArrayRef shape,
                                    c10::ScalarType dtype);

// `<save_dir>/step-<step>` (zero-padded).
std::string checkpoint_dir(const std::string& save_dir, int64_t step);
// Marks `dir` as the newest checkpoint of `save_dir`.
void write_latest(const std::string& save_dir, const std::string& dir);
// `<dir>/manifest.json`, written by rank 0 after every rank's file: which run wrote the
// checkpoint, at which step, with how many ranks (one file each).
struct CheckpointManifest {
  int64_t world_size = 1;
  int64_t step = -1;
  std::string run_id;
};
// Atomic, like the checkpoint files.
void write_manifest(const std::string& dir, const CheckpointManifest& manifest);
// A directory without a manifest (pstar before multi-rank training) reads as one rank at an
// unknown step; a malformed one is a FormatError naming the file and key.
CheckpointManifest read_manifest(const std::string& dir);
// `<dir>/ckpt-<rank>.pt`.
std::string checkpoint_file(const std::string& dir, int64_t rank);

// The directory to resume from: `dir` itself if it holds ckpt-0.pt, else the one `dir/latest`
// names. IoError saying what was looked for otherwise.
std::string resolve_resume_dir(const std::string& dir);

}  // namespace pstar::train
