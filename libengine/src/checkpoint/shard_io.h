// What the merge passes share (Note [merge passes] in merge.h); private to src/checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "pstar/checkpoint/index.h"
#include "pstar/checkpoint/merge.h"
#include "pstar/checkpoint/store.h"

namespace pstar::config {
struct TrainConfig;
}

namespace pstar::checkpoint::internal {

inline int64_t tensor_bytes(const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()); }

// Reads one checkpoint file after handing the memory of the previous one back to the system.
// glibc raises its mmap threshold as large blocks are freed, so later tensors come from the heap,
// and what a file's tensors leave there stays resident unless trimmed: without this the peak
// grows to several files' worth (Note [merge passes]).
TensorMap read_one_file(const std::string& file);

// The live progress line, only where info lines are shown.
void progress(const std::string& line);

// The tensors of one checkpoint file that the index said it holds, as read in the second pass
// (Note [merge passes]): FormatError if the file changed in between.
const at::Tensor& indexed_tensor(const TensorMap& tensors, const ShardParameter& p,
                                 const std::string& file);
// The same for one piece of a parameter (Note [checkpoint pieces]): its 1-D tensor, or with
// `suffix` (kExpAvg, kExpAvgSq) its Adam moment's.
const at::Tensor& indexed_piece(const TensorMap& tensors, const ShardParameter& p,
                                const ShardPiece& piece, const std::string& file,
                                const char* suffix = "");

// `merge-ckpt --reshard`: the checkpoint directory for o.reshard ranks, laid out by `config`
// (reshard.cpp, Note [reshard]).
MergeSummary write_resharded(const CheckpointIndex& index, const MergeOptions& o,
                             const config::TrainConfig& config);

}  // namespace pstar::checkpoint::internal
