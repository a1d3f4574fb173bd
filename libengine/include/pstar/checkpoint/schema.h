// The names inside a checkpoint file and its format version, in one place (Note [checkpoint
// contents] in run_checkpoint.cpp): the run's state is written and read by run_checkpoint.h, each
// engine's parameters and Adam state by the engine, and `pstar merge-ckpt` reads and reshards all
// of them (merge.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace pstar::checkpoint {

// The format this pstar writes and reads; a file of another version is refused.
inline constexpr int64_t kFormatVersion = 1;

// The run's own state: tensors whose names start with kRunPrefix. Every other tensor is a
// parameter (its Hugging Face name) or one of its Adam moments (name + a moment suffix).
inline constexpr const char* kRunPrefix = "__pstar__.";
inline constexpr const char* kFormatVersionKey = "__pstar__.format_version";
inline constexpr const char* kStep = "__pstar__.step";
inline constexpr const char* kTokens = "__pstar__.tokens";
inline constexpr const char* kSkippedSteps = "__pstar__.skipped_steps";
inline constexpr const char* kLossScaler = "__pstar__.loss_scaler";
inline constexpr const char* kRng = "__pstar__.rng";
inline constexpr const char* kRank = "__pstar__.rank";
inline constexpr const char* kWorldSize = "__pstar__.world_size";
inline constexpr const char* kAdamStep = "__pstar__.adam_step";  // written by the engine

// Note [held parameters] in engine/adam_steps.h: the updates parameter NAME missed (int64, a
// scalar), written only where it missed any, the same in every rank's file; its own Adam step
// count is kAdamStep's minus it. Absent: none (as in files written before it existed).
inline constexpr const char* kAdamMissedPrefix = "__pstar__.adam_missed.";
inline std::string adam_missed_of(const std::string& name) { return kAdamMissedPrefix + name; }

// Adam's first and second moments of parameter NAME are NAME + these.
inline constexpr const char* kExpAvg = ".exp_avg";
inline constexpr const char* kExpAvgSq = ".exp_avg_sq";

inline std::string exp_avg_of(const std::string& name) { return name + kExpAvg; }
inline std::string exp_avg_sq_of(const std::string& name) { return name + kExpAvgSq; }

// Note [checkpoint pieces]
// A tensor of a module split over the ranks (Note [split modules] in pstar/plan/chunk_layout.h)
// is kept in pieces, each rank saving its own: elements [begin, begin + n) of the tensor
// flattened, as a 1-D tensor named piece_name(name, begin) ("lm_head.weight#262668288"), with its
// Adam moments under that name plus the moment suffixes, beside an int64 tensor shape_name(name)
// that holds the whole tensor's shape. Readers (the index, merge-ckpt, resharding) join the pieces
// of every file into the tensor; a rank that resumes with the layout that wrote them reads its
// own pieces back. Every other tensor is whole in one rank's file.
inline constexpr char kPieceMark = '#';
inline constexpr const char* kShapePrefix = "__pstar__.shape.";
inline std::string piece_name(const std::string& name, int64_t begin) {
  return name + kPieceMark + std::to_string(begin);
}
inline std::string shape_name(const std::string& name) { return kShapePrefix + name; }
// "name#begin" -> (name, begin); nullopt for a name that is not a piece's.
std::optional<std::pair<std::string, int64_t>> parse_piece_name(const std::string& stored);

}  // namespace pstar::checkpoint
