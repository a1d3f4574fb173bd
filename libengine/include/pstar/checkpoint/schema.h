// The names inside a checkpoint file and its format version, in one place (Note [checkpoint
// contents] in run_checkpoint.cpp): the run's state is written and read by run_checkpoint.h, each
// engine's parameters and Adam state by the engine, and `pstar merge-ckpt` reads and reshards all
// of them (merge.h).
#pragma once

#include <cstdint>
#include <string>

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

// Adam's first and second moments of parameter NAME are NAME + these.
inline constexpr const char* kExpAvg = ".exp_avg";
inline constexpr const char* kExpAvgSq = ".exp_avg_sq";

inline std::string exp_avg_of(const std::string& name) { return name + kExpAvg; }
inline std::string exp_avg_sq_of(const std::string& name) { return name + kExpAvgSq; }

}  // namespace pstar::checkpoint
