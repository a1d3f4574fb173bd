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

namespace pstar::checkpoint {

// A checkpoint file's tensors by name: as written (in this order) and as read. Engines exchange
// their part of a checkpoint in these (train::ParamEngine::state_dict / load_state_dict).
using TensorList = std::vector<std::pair<std::string, at::Tensor>>;
using TensorMap = std::map<std::string, at::Tensor>;

// What a checkpoint file must hold to count as intact: its size and zlib CRC-32.
struct FileDigest {
  int64_t bytes = -1;
  uint32_t crc32 = 0;
  std::string to_text() const;  // "bytes crc32" (for exchanging between ranks)
  static FileDigest from_text(const std::string& text);
};

// "0x89abcdef": how messages show a CRC-32.
std::string crc32_text(uint32_t crc);

// The digest of a file on disk (one pass over it); IoError naming it if unreadable.
FileDigest file_digest(const std::string& path);

// Atomic: a temporary file, fsync, rename. IoError naming the path on failure.
FileDigest write_checkpoint_file(const std::string& path, const TensorList& tensors);

// FormatError naming the file when it is truncated, corrupt or not a dict of tensors; IoError
// when unreadable.
TensorMap read_checkpoint_file(const std::string& path);

// The tensor `name` of a checkpoint, checked against the shape and dtype the run needs;
// FormatError naming the file and the tensor otherwise.
const at::Tensor& checkpoint_tensor(const TensorMap& tensors, const std::string& name,
                                    const std::string& file, c10::IntArrayRef shape,
                                    c10::ScalarType dtype);

// The updates parameter `name` missed (adam_missed_of in schema.h; 0 where the file holds none),
// checked to be a scalar int64 from 0 to `adam_steps`; FormatError naming the file otherwise.
int64_t adam_missed(const TensorMap& tensors, const std::string& name, int64_t adam_steps,
                    const std::string& file);

// `<save_dir>/step-<step>` (zero-padded).
std::string checkpoint_dir(const std::string& save_dir, int64_t step);
// Marks `dir` as the newest checkpoint of `save_dir`.
void write_latest(const std::string& save_dir, const std::string& dir);
// `<dir>/manifest.json`, written by rank 0 after every rank's file: which run wrote the
// checkpoint, at which step, with how many ranks (one file each), each file's size and CRC-32, and
// (`pstar_version`, not read back) the pstar that wrote it.
struct CheckpointManifest {
  int64_t world_size = 1;
  int64_t step = -1;
  std::string run_id;
  // Rank r's file, as written; empty in manifests from pstar before checksums.
  std::vector<FileDigest> digests;
};
// Atomic, like the checkpoint files.
void write_manifest(const std::string& dir, const CheckpointManifest& manifest);
// A directory without a manifest (pstar before multi-rank training) reads as one rank at an
// unknown step; a malformed one is a FormatError naming the file and key.
CheckpointManifest read_manifest(const std::string& dir);
// `<dir>/ckpt-<rank>.pt`.
std::string checkpoint_file(const std::string& dir, int64_t rank);

// The checkpoint directories of `save_dir` (`step-N`), oldest first, complete or not.
struct CheckpointEntry {
  int64_t step = 0;
  std::string dir;
};
std::vector<CheckpointEntry> list_checkpoints(const std::string& save_dir);

// Empty if `dir` is a complete, intact checkpoint: a readable manifest and every rank's file,
// each of the size and CRC-32 the manifest records (read in full: this costs a pass over the
// files). Otherwise why not, naming the file.
std::string checkpoint_problem(const std::string& dir);
// The same for rank `rank`'s file alone, against `manifest` (read_manifest(dir)).
std::string checkpoint_file_problem(const std::string& dir, const CheckpointManifest& manifest,
                                    int64_t rank);

// The newest intact checkpoint of `save_dir` before step `before`; empty if there is none.
std::string newest_intact_checkpoint(const std::string& save_dir, int64_t before);

// Retention (training.keep_last): keeps the `keep_last` newest complete checkpoints up to
// `current` (the one just written, which `latest` already names) and deletes the older ones, and
// incomplete directories left before `current` by interrupted saves. Directories past `current`
// (another timeline, after resuming from an earlier step) are left alone. 0 keeps everything.
// Returns the directories deleted.
std::vector<std::string> prune_checkpoints(const std::string& save_dir, int64_t current,
                                           int64_t keep_last);

// Deletes the `ckpt-<r>.pt` files of `dir` with r >= `world_size`: what a run of more ranks left in
// a step directory that a run of fewer ranks (resumed by resharding) saves into again. Returns
// the files deleted.
std::vector<std::string> remove_files_of_ranks_from(const std::string& dir, int64_t world_size);

// Deletes the temporaries a killed writer of `dir/<file>` left behind (atomic writes name them
// `.<file>.tmp.*`).
void remove_stale_temporaries(const std::string& dir, const std::string& file);

// Where --resume DIR points: DIR itself if it holds ckpt-0.pt, else the directory `DIR/latest`
// names (`via_latest`). IoError saying what was looked for otherwise.
struct ResumeTarget {
  std::string dir;
  bool via_latest = false;
};
ResumeTarget resolve_resume_dir(const std::string& dir);

}  // namespace pstar::checkpoint
