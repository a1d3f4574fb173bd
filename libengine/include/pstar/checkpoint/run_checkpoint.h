// A training run's checkpoints, as the trainer saves and resumes them (Note [checkpoint contents]
// in run_checkpoint.cpp): every rank writes its file, and rank 0 the manifest, config.json and
// `latest` once every file is on disk; at --resume the ranks check the files between them, name
// the newest intact checkpoint when the one given is not, and reshard a checkpoint of another
// number of ranks on the fly (Note [resume resharding]). The engine's part of a checkpoint comes
// and goes as a tensor list or map (train::ParamEngine::state_dict / load_state_dict), the run's
// own part as a RunState.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include <ATen/core/Tensor.h>

#include "pstar/checkpoint/store.h"
#include "pstar/formats/config.h"

namespace pstar::dist {
class Communicator;
}

namespace pstar::checkpoint {

// What a checkpoint holds besides the engine's tensors so that the run continues bit-identically.
struct RunState {
  int64_t step = 0;  // also the data position: sampling is a pure function of the step
  int64_t tokens = 0;
  int64_t skipped_steps = 0;
  std::array<double, 3> loss_scaler{};  // train::LossScaler::state()
  at::Tensor rng;                       // LibTorch's CPU generator state
};

// The engine's part of a checkpoint: fills the list (ParamEngine::state_dict).
using EngineSaver = std::function<void(TensorList& out)>;
// Restores it from a checkpoint's tensors; FormatError naming `file`
// (ParamEngine::load_state_dict).
using EngineLoader = std::function<void(const TensorMap& in, const std::string& file)>;

// One rank's view of a run's checkpoints: writes them into training.save_dir and remembers the
// last one written or resumed from, for messages.
class RunCheckpoints {
 public:
  // `config`: the run's resolved config (training.save_dir, keep_last, steps; config.json; the
  // model and engine.mode for resharding). `comm`: the run's communicator, null for one rank; with
  // several ranks, save, resume and set_run_id are collective.
  RunCheckpoints(const config::TrainConfig& config, dist::Communicator* comm);

  // Names the run (recorded in every manifest): rank 0's id for every rank.
  void set_run_id(const std::string& mine);
  const std::string& run_id() const { return run_id_; }

  // Finds now, not at the first save hours later, a training.save_dir that cannot be written, and
  // warns (rank 0) when its disk cannot hold the checkpoints keep_last keeps of a model of
  // `num_parameters`. Nothing to do without a save_dir.
  void check_save_dir(int64_t num_parameters) const;

  // Writes the checkpoint of step state.step: this rank's file (the engine's tensors, then the run
  // state), and on rank 0, once every rank's file is on disk, the manifest, config.json and
  // `latest`; then older checkpoints beyond training.keep_last go. IoError when any rank could not
  // write its file (the partial directory is removed; the last checkpoint stays intact).
  void save(const RunState& state, const EngineSaver& engine_tensors);

  // --resume `where` (a step directory or a save_dir): checks the files against the manifest
  // (FormatError naming the newest intact checkpoint when they are not intact), reads this rank's
  // tensors (or reshards them from a checkpoint of another number of ranks), checks the format
  // version, has `load_engine` restore the engine, takes the checkpoint's run id, and returns the
  // run state. ConfigError when the checkpoint is past training.steps.
  RunState resume(const std::string& where, const EngineLoader& load_engine);

  // The step of the last checkpoint written or resumed from; -1 before any.
  int64_t last_saved_step() const { return last_saved_step_; }
  // For errors that end a run: "; the last checkpoint is DIR", empty before any.
  std::string last_checkpoint_hint() const;
  // For failures that leave it untouched: ". The last checkpoint, DIR, is intact", empty before
  // any.
  std::string intact_hint() const;

 private:
  TensorMap resharded_tensors(const std::string& dir, int64_t old_world) const;

  config::TrainConfig config_;
  dist::Communicator* comm_ = nullptr;
  int64_t rank_ = 0;
  int64_t world_ = 1;
  std::string run_id_;
  int64_t last_saved_step_ = -1;
  std::string last_saved_dir_;
};

}  // namespace pstar::checkpoint
