#include "pstar/checkpoint/run_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <limits>
#include <vector>

#include <sys/statvfs.h>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/base/size.h"
#include "pstar/checkpoint/index.h"
#include "pstar/checkpoint/reshard.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/dist/communicator.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/model/model_shape.h"

namespace pstar::checkpoint {

namespace fs = std::filesystem;

RunCheckpoints::RunCheckpoints(const config::TrainConfig& config, dist::Communicator* comm)
    : config_(config), comm_(comm) {
  if (comm_ != nullptr) {
    rank_ = comm_->rank();
    world_ = comm_->world_size();
  }
}

void RunCheckpoints::set_run_id(const std::string& mine) {
  run_id_ = comm_ != nullptr ? comm_->exchange("run_id", mine)[0] : mine;
}

std::string RunCheckpoints::last_checkpoint_hint() const {
  return last_saved_dir_.empty() ? std::string()
                                 : str_cat("; the last checkpoint is ", last_saved_dir_);
}

std::string RunCheckpoints::intact_hint() const {
  return last_saved_dir_.empty()
             ? std::string()
             : str_cat(". The last checkpoint, ", last_saved_dir_, ", is intact");
}

// Note [checkpoint contents]
// Besides the engine's parameters and Adam state, a checkpoint holds what makes the continuation
// bit-identical: the step (which is also the data position, as sampling is a pure function of the
// step), tokens so far, the loss scaler and LibTorch's CPU generator state.
void RunCheckpoints::save(const RunState& state, const EngineSaver& engine_tensors) {
  const auto begin = core::Clock::now();
  const std::string& save_dir = config_.training.save_dir;
  const int64_t step = state.step;
  const std::string dir = checkpoint_dir(save_dir, step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  PSTAR_CHECK(!ec, IoError, "training.save_dir: cannot create ", dir, ": ", ec.message());
  const std::string file = checkpoint_file(dir, rank_);
  // Saving into a directory of the same step again (a run resumed before it): it stops counting
  // as complete until the new manifest is written. A killed save left its temporary there.
  if (rank_ == 0) {
    fs::remove(fs::path(dir) / "manifest.json", ec);
    // A run of more ranks saved this step before (this one resumed by resharding, Note [resume
    // resharding]): its other ranks' files are not part of this checkpoint.
    for (const std::string& old : remove_files_of_ranks_from(dir, world_))
      log::debug("checkpoint: deleted ", old, ", a file of a run with more ranks");
  }
  remove_stale_temporaries(dir, fs::path(file).filename().string());
  TensorList tensors;
  engine_tensors(tensors);
  tensors.emplace_back(kFormatVersionKey, torch::tensor(kFormatVersion));
  tensors.emplace_back(kStep, torch::tensor(step));
  tensors.emplace_back(kTokens, torch::tensor(state.tokens));
  tensors.emplace_back(kSkippedSteps, torch::tensor(state.skipped_steps));
  tensors.emplace_back(kLossScaler, torch::tensor(std::vector<double>(state.loss_scaler.begin(),
                                                                      state.loss_scaler.end()),
                                                  torch::kFloat64));
  tensors.emplace_back(kRng, state.rng);
  tensors.emplace_back(kRank, torch::tensor(rank_));
  tensors.emplace_back(kWorldSize, torch::tensor(world_));
  // Each rank reports its file's digest, or why it could not write it, so that a full disk on
  // one rank stops every rank with the same message instead of leaving them in a barrier.
  std::string mine;
  try {
    mine = write_checkpoint_file(file, tensors).to_text();
  } catch (const IoError& e) {
    if (comm_ == nullptr) {
      fs::remove_all(dir, ec);
      PSTAR_THROW(IoError, "the checkpoint of step ", step, " was not saved: ", e.what(),
                  intact_hint());
    }
    mine = str_cat("error: ", e.what());
  }
  std::vector<std::string> reports{mine};
  if (comm_ != nullptr) reports = comm_->exchange(str_cat("checkpoint-", step), mine);
  CheckpointManifest manifest{world_, step, run_id_, {}};
  for (int64_t r = 0; r < world_; ++r) {
    const std::string& report = reports[static_cast<size_t>(r)];
    if (report.compare(0, 7, "error: ") == 0) {
      // Every rank has finished trying (the exchange): rank 0 clears the partial directory.
      if (rank_ == 0) fs::remove_all(dir, ec);
      PSTAR_THROW(IoError, "the checkpoint of step ", step, " was not saved: rank ", r, ": ",
                  report.substr(7), intact_hint());
    }
    manifest.digests.push_back(FileDigest::from_text(report));
  }
  // The checkpoint counts only once every rank's file is on disk: then rank 0 describes it and
  // points `latest` at it, and only then are older checkpoints let go.
  if (rank_ == 0) {
    write_manifest(dir, manifest);
    const std::string config_text = config::to_json_text(config_);
    formats::write_file_atomic((fs::path(dir) / "config.json").string(), config_text.data(),
                               config_text.size());
    write_latest(save_dir, dir);
    for (const std::string& old : prune_checkpoints(save_dir, step, config_.training.keep_last))
      log::debug("training.keep_last ", config_.training.keep_last, ": deleted ", old);
  }
  last_saved_step_ = step;
  last_saved_dir_ = dir;
  log::info("checkpoint: ", file, " (", fs::file_size(file) >> 20, " MiB) in ",
            format_duration(core::seconds_since(begin)));
}

void RunCheckpoints::check_save_dir(int64_t num_parameters) const {
  const std::string& save_dir = config_.training.save_dir;
  if (save_dir.empty()) return;
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  PSTAR_CHECK(!ec, IoError, "training.save_dir: cannot create ", save_dir, ": ", ec.message(),
              "; choose a directory this user can write");
  const std::string probe = (fs::path(save_dir) / str_cat(".write-check-", rank_)).string();
  try {
    const char byte = 0;
    formats::write_file_atomic(probe, &byte, 1);
  } catch (const IoError& e) {
    PSTAR_THROW(IoError, "training.save_dir: ", save_dir, " is not writable (", e.what(),
                "); choose a directory this user can write");
  }
  fs::remove(probe, ec);
  if (config_.training.save_interval == 0) return;
  // Per rank: fp32 master, momentum and variance (12 B/param), and the run's own few tensors.
  const int64_t per_checkpoint = 12 * num_parameters + (1 << 20);
  const int64_t kept = config_.training.keep_last > 0 ? config_.training.keep_last + 1 : 0;
  struct statvfs fs {};
  if (rank_ == 0 && kept > 0 && ::statvfs(save_dir.c_str(), &fs) == 0) {
    const auto free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    if (free_bytes < kept * per_checkpoint) {
      log::warn("training.save_dir: ", save_dir, " has ", format_bytes(free_bytes),
                " free, but training.keep_last ", config_.training.keep_last, " keeps up to ", kept,
                " checkpoints of about ", format_bytes(per_checkpoint),
                " (one more while a new one is written); free space or lower keep_last");
    }
  }
}

RunState RunCheckpoints::resume(const std::string& where, const EngineLoader& load_engine) {
  const ResumeTarget target = resolve_resume_dir(where);
  const std::string& dir = target.dir;
  // Every rank checks its own file against the manifest first, and all of them agree on the
  // verdict, so a bad file stops every rank with the same message.
  // On another number of ranks (Note [resume resharding]) every old file is read by every rank,
  // so they share the checking: old rank q's file is checked by new rank q % world.
  std::string problem;
  CheckpointManifest manifest;
  try {
    manifest = read_manifest(dir);
    for (int64_t q = manifest.world_size == world_ ? rank_ : 0;
         q < manifest.world_size && problem.empty(); ++q) {
      if (manifest.world_size != world_ && q % world_ != rank_) continue;
      problem = checkpoint_file_problem(dir, manifest, q);
      if (manifest.world_size == world_) break;
    }
  } catch (const Error& e) {
    problem = e.what();
  }
  if (comm_ != nullptr) {
    const auto all = comm_->exchange("resume-check", problem);
    for (const auto& p : all)
      if (problem.empty() && !p.empty()) problem = p;
  }
  if (!problem.empty()) {
    // A save_dir given: look for something better in it; a step directory: in its save_dir.
    fs::path step_dir = fs::path(dir).lexically_normal();
    if (step_dir.filename().empty()) step_dir = step_dir.parent_path();  // "ck/step-N/"
    std::string save_dir = target.via_latest ? where : step_dir.parent_path().string();
    if (save_dir.empty()) save_dir = ".";
    int64_t at = std::numeric_limits<int64_t>::max();
    long long parsed = 0;
    if (std::sscanf(step_dir.filename().string().c_str(), "step-%lld", &parsed) == 1) at = parsed;
    const std::string intact = newest_intact_checkpoint(save_dir, at);
    PSTAR_THROW(FormatError, "--resume ", where, ": checkpoint ", dir, " is not intact: ", problem,
                intact.empty() ? str_cat("; no older intact checkpoint is left in ", save_dir)
                               : str_cat("; the newest intact one is ", intact,
                                         ": continue with --resume ", intact));
  }
  if (!manifest.run_id.empty()) run_id_ = manifest.run_id;
  std::string file = checkpoint_file(dir, rank_);
  TensorMap tensors;
  if (manifest.world_size == world_) {
    tensors = read_checkpoint_file(file);
  } else {
    tensors = resharded_tensors(dir, manifest.world_size);
    file = str_cat(dir, " (resharded for rank ", rank_, " of ", world_, ")");
  }
  const int64_t version =
      checkpoint_tensor(tensors, kFormatVersionKey, file, {}, torch::kInt64).item<int64_t>();
  PSTAR_CHECK(version == kFormatVersion, FormatError, file, ": checkpoint format version ", version,
              " is not supported by this pstar (expected ", kFormatVersion, ")");
  load_engine(tensors, file);
  RunState state;
  state.step = checkpoint_tensor(tensors, kStep, file, {}, torch::kInt64).item<int64_t>();
  state.tokens = checkpoint_tensor(tensors, kTokens, file, {}, torch::kInt64).item<int64_t>();
  state.skipped_steps =
      checkpoint_tensor(tensors, kSkippedSteps, file, {}, torch::kInt64).item<int64_t>();
  const auto s = checkpoint_tensor(tensors, kLossScaler, file, {3}, torch::kFloat64);
  state.loss_scaler = {s[0].item<double>(), s[1].item<double>(), s[2].item<double>()};
  auto it = tensors.find(kRng);
  PSTAR_CHECK(it != tensors.end(), FormatError, file, ": tensor '", kRng, "' is missing");
  state.rng = it->second;
  PSTAR_CHECK(state.step <= config_.training.steps, ConfigError, "--resume ", where,
              ": the checkpoint is at step ", state.step, ", past training.steps ",
              config_.training.steps, "; raise training.steps");
  // A stop right away need not write this step again.
  last_saved_step_ = state.step;
  last_saved_dir_ = dir;
  log::info("resumed from ", file, " at step ", state.step);
  return state;
}

// Note [resume resharding]
// A checkpoint of M ranks resumes on N != M ranks by resharding it on the fly: each rank indexes
// the old files (index.h, one read of each, after the ranks have checked them against the
// manifest between them) and loads exactly what `merge-ckpt --reshard N` would have written to
// its file (resharded_rank_tensors, Note [reshard] in reshard.cpp), laid out by this run's config.
// So a run resumed either way continues identically. The chunk layout comes from the model that the
// config describes (GPT or Llama); a user's own model resumes on the number of ranks that wrote its
// checkpoint.
TensorMap RunCheckpoints::resharded_tensors(const std::string& dir, int64_t old_world) const {
  PSTAR_CHECK(config_.engine.mode == config::EngineMode::kChunked, ConfigError, "--resume ", dir,
              ": the checkpoint was written by ", old_world, " rank(s); resharding it for ", world_,
              " is for the chunk engine");
  try {
    (void)model::resolve_model_shape(config_.model);
  } catch (const Error& e) {
    PSTAR_THROW(
        ConfigError, "--resume ", dir, ": the checkpoint was written by ", old_world,
        " rank(s) but this run has ", world_,
        "; resharding follows the chunk layout of a model pstar builds, and this is not one (",
        e.what(), "); resume with --nproc ", old_world);
  }
  std::vector<std::string> files;
  for (int64_t q = 0; q < old_world; ++q) files.push_back(checkpoint_file(dir, q));
  IndexOptions options;
  options.verify = false;  // every file was checked just now, by one of the ranks
  options.label = "resume";
  const CheckpointIndex index = index_checkpoint(files, old_world, options);
  const TensorList mine = resharded_rank_tensors(index, config_, world_, rank_);
  if (rank_ == 0) {
    log::info("resume: resharding ", dir, " from the ", old_world,
              " rank(s) that wrote it to this run's ", world_,
              " (as pstar merge-ckpt --reshard would; Note [resume resharding])");
  }
  return TensorMap(mine.begin(), mine.end());
}

}  // namespace pstar::checkpoint
