// The names inside a checkpoint file, in one place (Note [checkpoint contents] in trainer.cpp):
// the trainer writes and reads the run's state, each engine its parameters and Adam state, and
// `pstar merge-ckpt` reads and reshards all of them.
#pragma once

#include <cstdint>
#include <string>

namespace pstar::train::ckpt {

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

}  // namespace pstar::train::ckpt
