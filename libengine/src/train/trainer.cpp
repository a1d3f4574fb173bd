#include "pstar/train/trainer.h"
#include "pstar/train/checkpoint_schema.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>

#include <sys/statvfs.h>

#include <ATen/CPUGeneratorImpl.h>

#include <nlohmann/json.hpp>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/base/version.h"
#include "pstar/core/clock.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/core/stop.h"
#include "pstar/core/torch_compat.h"
#include "pstar/data/batch_sampler.h"
#include "pstar/data/token_source.h"
#include "pstar/dist/communicator.h"
#include "pstar/dist/world.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/engine/param_engine.h"
#include "pstar/engine/torch_engine.h"
#include "pstar/formats/config.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/model/gpt.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/hf_gpt2.h"
#include "pstar/model/hooks.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/plan/run_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/checkpoint.h"
#include "pstar/train/loss_scaler.h"
#include "pstar/train/lr_schedule.h"
#include "pstar/train/merge.h"
#include "pstar/train/metrics.h"
#include "pstar/train/precision.h"
#include "pstar/train/profiler.h"
#include "pstar/train/run_facts.h"

namespace pstar::train {
namespace {

using core::Clock;
using core::seconds_since;

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string human_duration(double s) {
  const auto total = static_cast<int64_t>(std::llround(std::max(0.0, s)));
  char buf[32];
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  return buf;
}

std::string fixed4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

// LibTorch builds differ in which low-precision kernels exist (1.13 has no fp16 matmul on CPU):
// find out before training rather than failing inside the first forward.
void check_dtype_supported(c10::ScalarType dtype, c10::Device device) {
  if (dtype == torch::kFloat32) return;
  const char* key = dtype == torch::kBFloat16 ? "bf16.enabled" : "fp16.enabled";
  try {
    auto a = torch::ones({2, 2}, torch::dtype(dtype).device(device));
    (void)torch::matmul(a, a);
  } catch (const c10::Error&) {
    PSTAR_THROW(ConfigError, key, ": this LibTorch (", compat::torch_version(), ") has no ",
                c10::toString(dtype), " matmul on ", device.str(),
                dtype == torch::kFloat16 ? "; use bf16.enabled on CPU" : "; train in fp32");
  }
}

std::string new_run_id() {
  std::random_device random;
  char id[24];
  std::snprintf(id, sizeof id, "%08x%08x", random(), random());
  return id;
}

// Every rank must train the same config: the first key where a rank differs from rank 0.
void check_same_config(dist::Communicator& comm, const config::TrainConfig& config) {
  const auto texts = comm.exchange("config", config::to_json_text(config));
  for (int64_t r = 1; r < comm.world_size(); ++r) {
    if (texts[r] == texts[0]) continue;
    const auto mine = nlohmann::json::parse(texts[r]).flatten();
    const auto first = nlohmann::json::parse(texts[0]).flatten();
    std::string key = "(unknown)", theirs = "absent", ours = "absent";
    for (const auto& [k, v] : first.items()) {
      if (mine.contains(k) && mine[k] == v) continue;
      key = k;
      ours = v.dump();
      theirs = mine.contains(k) ? mine[k].dump() : "absent";
      break;
    }
    if (key == "(unknown)") {
      for (const auto& [k, v] : mine.items()) {
        if (first.contains(k)) continue;
        key = k;
        theirs = v.dump();
        break;
      }
    }
    // JSON pointer "/training/steps" -> the config's own spelling "training.steps".
    std::replace(key.begin(), key.end(), '/', '.');
    if (!key.empty() && key[0] == '.') key.erase(0, 1);
    PSTAR_THROW(ConfigError, "rank ", r, "'s config differs from rank 0's at ", key, ": ", theirs,
                " vs ", ours, "; every rank must start with the same config and --set options");
  }
}

}  // namespace

c10::Device compute_device(const config::TrainConfig& config, const std::string& device_option) {
  if (config.engine.mode != config::EngineMode::kChunked || tier::cuda_tier_built())
    return core::resolve_device(device_option, "--device");
  // Without the CUDA tier the chunk engine's device tier is emulated on the CPU (Note [device
  // tier]), whatever GPU LibTorch sees.
  PSTAR_CHECK(device_option != "cuda", ConfigError,
              "--device cuda: this build of pstar has no CUDA device tier for the chunk engine (it "
              "was built without a CUDA LibTorch; docs/cuda.md says how to build one); use "
              "--device cpu (the device tier emulated on the CPU) or engine.mode \"torch\"");
  if (device_option != "cpu") core::resolve_device(device_option, "--device");  // checks the name
  return c10::Device(c10::kCPU);
}

namespace {

using engine::ChunkedEngine;
using engine::ParamEngine;

// The chunk engine's device tier for the plan's compute device (Note [device tier]).
std::unique_ptr<tier::DeviceTier> make_tier(const plan::RunPlan& plan,
                                            int64_t predicted_non_model) {
  if (plan.device == plan::DeviceKind::kCpu) return tier::make_emulated_tier();
  return tier::make_device_tier(plan_device(plan),
                                ChunkedEngine::device_arena_bytes(plan, predicted_non_model));
}

}  // namespace

struct Trainer::Impl {
  config::TrainConfig config;
  std::shared_ptr<model::CausalLM> model;
  TrainOptions options;
  c10::Device device{c10::kCPU};
  c10::ScalarType dtype = torch::kFloat32;

  std::unique_ptr<data::TokenSource> source;
  std::unique_ptr<data::BatchSampler> sampler;
  std::unique_ptr<ParamEngine> engine;
  LrSchedule schedule;
  LossScaler scaler;
  std::optional<MetricsWriter> metrics;
  std::unique_ptr<Profiler> profiler;

  int64_t step = 0;
  int64_t tokens = 0;
  int64_t skipped = 0;
  std::optional<Clock::time_point> start;
  dist::Communicator* comm = nullptr;  // several ranks only
  int64_t rank = 0, world = 1;
  std::string run_id;
  int64_t last_saved_step = -1;
  std::string last_saved_dir;
  int stop_signal = 0;  // agreed by every rank: the run stops (Note [graceful stop])
  at::Tensor step_rng;  // the generator as the current step found it

  Impl(const config::TrainConfig& c, std::shared_ptr<model::CausalLM> m, const TrainOptions& o)
      : config(c), model(std::move(m)), options(o), schedule(c), scaler(c.fp16), comm(o.comm) {
    if (comm != nullptr) {
      rank = comm->rank();
      world = comm->world_size();
    }
  }

  // Over all ranks: the global batch.
  int64_t tokens_per_step() const {
    return world * config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps *
           model->max_seq_len();
  }

  void init(std::unique_ptr<ParamEngine> prebuilt);
  void start_profile();
  std::string rank_path(const std::string& path) const {
    return rank == 0 ? path : str_cat(path, ".rank", rank);
  }
  // nullopt: a stop was agreed between micro-batches and the step was abandoned.
  std::optional<StepMetrics> run_step(bool may_abandon);
  std::optional<StepMetrics> train_step(bool may_abandon);
  bool agree_to_stop();
  // For errors that end a run: where to continue from.
  std::string last_checkpoint_hint() const {
    return last_saved_dir.empty() ? std::string()
                                  : str_cat("; the last checkpoint is ", last_saved_dir);
  }
  bool abandon_step(double seconds_so_far, int64_t micro_done, double* rest_s);
  void stop_after(int64_t completed_step);
  void check_save_dir();
  void save_checkpoint();
  void resume(const std::string& dir);
  TensorMap resharded_tensors(const std::string& dir, const CheckpointManifest& manifest);
};

// Note [graceful stop]
// SIGINT/SIGTERM (core/stop.h) only raise a flag. The trainer looks at it where the model data is
// consistent: after each step, and between micro-batches when gradient accumulation makes the rest
// of a step long (TrainOptions::abandon_step_after_s, 10 s by default, at the step's own pace).
// Abandoning a step loses its micro-batches but nothing else: masters and Adam state change only in
// update(), and the RNG is put back to where the step began, so the checkpoint is the one the
// previous step would have written. Every rank must stop at the same point or the others would wait
// in a collective: the flag is all-reduced at each point (one scalar), and so is the estimate that
// decides abandoning. A second signal kills the process at once (stop.cpp); checkpoint files are
// written atomically, so the last complete one stays valid.

// Note [checkpoint contents]
// Besides the engine's parameters and Adam state, a checkpoint holds what makes the continuation
// bit-identical: the step (which is also the data position, as sampling is a pure function of the
// step), tokens so far, the loss scaler and LibTorch's CPU generator state.
void Trainer::Impl::save_checkpoint() {
  const auto begin = Clock::now();
  const std::string& save_dir = config.training.save_dir;
  const std::string dir = checkpoint_dir(save_dir, step);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  PSTAR_CHECK(!ec, IoError, "training.save_dir: cannot create ", dir, ": ", ec.message());
  const std::string file = checkpoint_file(dir, rank);
  // Saving into a directory of the same step again (a run resumed before it): it stops counting
  // as complete until the new manifest is written. A killed save left its temporary there.
  if (rank == 0) {
    std::filesystem::remove(std::filesystem::path(dir) / "manifest.json", ec);
    // A run of more ranks saved this step before (this one resumed by resharding, Note [resume
    // resharding]): its other ranks' files are not part of this checkpoint.
    for (const std::string& old : remove_files_of_ranks_from(dir, world))
      log::debug("checkpoint: deleted ", old, ", a file of a run with more ranks");
  }
  remove_stale_temporaries(dir, std::filesystem::path(file).filename().string());
  TensorList tensors;
  engine->state_dict(tensors);
  const auto scaler_state = scaler.state();
  tensors.emplace_back(ckpt::kFormatVersionKey, torch::tensor(ckpt::kFormatVersion));
  tensors.emplace_back(ckpt::kStep, torch::tensor(step));
  tensors.emplace_back(ckpt::kTokens, torch::tensor(tokens));
  tensors.emplace_back(ckpt::kSkippedSteps, torch::tensor(skipped));
  tensors.emplace_back(ckpt::kLossScaler,
                       torch::tensor(std::vector<double>(scaler_state.begin(), scaler_state.end()),
                                     torch::kFloat64));
  tensors.emplace_back(ckpt::kRng, at::detail::getDefaultCPUGenerator().get_state());
  tensors.emplace_back(ckpt::kRank, torch::tensor(rank));
  tensors.emplace_back(ckpt::kWorldSize, torch::tensor(world));
  // Each rank reports its file's digest, or why it could not write it, so that a full disk on
  // one rank stops every rank with the same message instead of leaving them in a barrier.
  std::string mine;
  try {
    mine = write_checkpoint_file(file, tensors).to_text();
  } catch (const IoError& e) {
    if (comm == nullptr) {
      std::filesystem::remove_all(dir, ec);
      PSTAR_THROW(IoError, "the checkpoint of step ", step, " was not saved: ", e.what(),
                  last_saved_dir.empty()
                      ? std::string()
                      : str_cat(". The last checkpoint, ", last_saved_dir, ", is intact"));
    }
    mine = str_cat("error: ", e.what());
  }
  std::vector<std::string> reports{mine};
  if (comm != nullptr) reports = comm->exchange(str_cat("checkpoint-", step), mine);
  CheckpointManifest manifest{world, step, run_id, {}};
  for (int64_t r = 0; r < world; ++r) {
    const std::string& report = reports[static_cast<size_t>(r)];
    if (report.compare(0, 7, "error: ") == 0) {
      // Every rank has finished trying (the exchange): rank 0 clears the partial directory.
      if (rank == 0) std::filesystem::remove_all(dir, ec);
      PSTAR_THROW(IoError, "the checkpoint of step ", step, " was not saved: rank ", r, ": ",
                  report.substr(7),
                  last_saved_dir.empty()
                      ? std::string()
                      : str_cat(". The last checkpoint, ", last_saved_dir, ", is intact"));
    }
    manifest.digests.push_back(FileDigest::from_text(report));
  }
  // The checkpoint counts only once every rank's file is on disk: then rank 0 describes it and
  // points `latest` at it, and only then are older checkpoints let go.
  if (rank == 0) {
    write_manifest(dir, manifest);
    const std::string config_text = config::to_json_text(config);
    formats::write_file_atomic((std::filesystem::path(dir) / "config.json").string(),
                               config_text.data(), config_text.size());
    write_latest(save_dir, dir);
    for (const std::string& old : prune_checkpoints(save_dir, step, config.training.keep_last))
      log::debug("training.keep_last ", config.training.keep_last, ": deleted ", old);
  }
  last_saved_step = step;
  last_saved_dir = dir;
  log::info("checkpoint: ", file, " (", std::filesystem::file_size(file) >> 20, " MiB) in ",
            human_duration(seconds_since(begin)));
}

// A save_dir that cannot be written is found now, not at the first save hours later; so is a
// disk too small for the checkpoints keep_last keeps.
void Trainer::Impl::check_save_dir() {
  const std::string& save_dir = config.training.save_dir;
  if (save_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(save_dir, ec);
  PSTAR_CHECK(!ec, IoError, "training.save_dir: cannot create ", save_dir, ": ", ec.message(),
              "; choose a directory this user can write");
  const std::string probe =
      (std::filesystem::path(save_dir) / str_cat(".write-check-", rank)).string();
  try {
    const char byte = 0;
    formats::write_file_atomic(probe, &byte, 1);
  } catch (const IoError& e) {
    PSTAR_THROW(IoError, "training.save_dir: ", save_dir, " is not writable (", e.what(),
                "); choose a directory this user can write");
  }
  std::filesystem::remove(probe, ec);
  if (config.training.save_interval == 0) return;
  // Per rank: fp32 master, momentum and variance (12 B/param), and the run's own few tensors.
  int64_t params = engine->num_parameters();
  if (params < 0) {
    params = 0;
    for (auto& p : model->parameters()) params += p.numel();
  }
  const int64_t per_checkpoint = 12 * params + (1 << 20);
  const int64_t kept = config.training.keep_last > 0 ? config.training.keep_last + 1 : 0;
  struct statvfs fs {};
  if (rank == 0 && kept > 0 && ::statvfs(save_dir.c_str(), &fs) == 0) {
    const auto free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    if (free_bytes < kept * per_checkpoint) {
      log::warn("training.save_dir: ", save_dir, " has ", format_bytes(free_bytes),
                " free, but training.keep_last ", config.training.keep_last, " keeps up to ", kept,
                " checkpoints of about ", format_bytes(per_checkpoint),
                " (one more while a new one is written); free space or lower keep_last");
    }
  }
}

bool Trainer::Impl::agree_to_stop() {
  int local = core::stop_signal();
  if (comm != nullptr) {
    // Ranks that got no signal stop because another did: as if told by SIGTERM.
    if (comm->all_reduce_sum(local != 0 ? 1.0 : 0.0) > 0 && local == 0) local = SIGTERM;
  }
  if (local != 0) stop_signal = local;
  return stop_signal != 0;
}

bool Trainer::Impl::abandon_step(double seconds_so_far, int64_t micro_done, double* rest_s) {
  // A profile records whole steps: a profiled run finishes its step.
  if (profiler != nullptr || !agree_to_stop()) return false;
  // The rest of the step at its own pace so far; every rank decides on the same (mean) figure.
  double rest = seconds_so_far / static_cast<double>(micro_done) *
                static_cast<double>(config.gradient_accumulation_steps - micro_done);
  if (comm != nullptr) rest = comm->all_reduce_sum(rest) / static_cast<double>(world);
  *rest_s = rest;
  return rest > options.abandon_step_after_s;
}

void Trainer::Impl::stop_after(int64_t completed_step) {
  const char* name = stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
  log::end_status();
  if (!config.training.save_dir.empty()) {
    if (last_saved_step != completed_step) save_checkpoint();
    log::info("stopped on ", name, " after step ", completed_step, " of ", config.training.steps,
              "; continue with the same command and --resume ", config.training.save_dir);
  } else {
    log::warn("stopped on ", name, " after step ", completed_step, " of ", config.training.steps,
              "; training.save_dir is not set, so no checkpoint was written");
  }
}

void Trainer::Impl::resume(const std::string& where) {
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
    for (int64_t q = manifest.world_size == world ? rank : 0;
         q < manifest.world_size && problem.empty(); ++q) {
      if (manifest.world_size != world && q % world != rank) continue;
      problem = checkpoint_file_problem(dir, manifest, q);
      if (manifest.world_size == world) break;
    }
  } catch (const Error& e) {
    problem = e.what();
  }
  if (comm != nullptr) {
    const auto all = comm->exchange("resume-check", problem);
    for (const auto& p : all)
      if (problem.empty() && !p.empty()) problem = p;
  }
  if (!problem.empty()) {
    // A save_dir given: look for something better in it; a step directory: in its save_dir.
    std::filesystem::path step_dir = std::filesystem::path(dir).lexically_normal();
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
  if (!manifest.run_id.empty()) run_id = manifest.run_id;
  std::string file = checkpoint_file(dir, rank);
  TensorMap tensors;
  if (manifest.world_size == world) {
    tensors = read_checkpoint_file(file);
  } else {
    tensors = resharded_tensors(dir, manifest);
    file = str_cat(dir, " (resharded for rank ", rank, " of ", world, ")");
  }
  const int64_t version =
      checkpoint_tensor(tensors, ckpt::kFormatVersionKey, file, {}, torch::kInt64).item<int64_t>();
  PSTAR_CHECK(version == ckpt::kFormatVersion, FormatError, file, ": checkpoint format version ",
              version, " is not supported by this pstar (expected ", ckpt::kFormatVersion, ")");
  engine->load_state_dict(tensors, file);
  step = checkpoint_tensor(tensors, ckpt::kStep, file, {}, torch::kInt64).item<int64_t>();
  tokens = checkpoint_tensor(tensors, ckpt::kTokens, file, {}, torch::kInt64).item<int64_t>();
  skipped =
      checkpoint_tensor(tensors, ckpt::kSkippedSteps, file, {}, torch::kInt64).item<int64_t>();
  const auto s = checkpoint_tensor(tensors, ckpt::kLossScaler, file, {3}, torch::kFloat64);
  scaler.set_state({s[0].item<double>(), s[1].item<double>(), s[2].item<double>()});
  auto it = tensors.find(ckpt::kRng);
  PSTAR_CHECK(it != tensors.end(), FormatError, file, ": tensor '__pstar__.rng' is missing");
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(it->second);
  PSTAR_CHECK(step <= config.training.steps, ConfigError, "--resume ", where,
              ": the checkpoint is at step ", step, ", past training.steps ", config.training.steps,
              "; raise training.steps");
  // A stop right away need not write this step again.
  last_saved_step = step;
  last_saved_dir = dir;
  log::info("resumed from ", file, " at step ", step);
}

// Note [resume resharding]
// A checkpoint of M ranks resumes on N != M ranks by resharding it on the fly: each rank indexes
// the old files (train/merge.h, one read of each, after the ranks have checked them against the
// manifest between them) and loads exactly what `merge-ckpt --reshard N` would have written to
// its file (resharded_rank_tensors, Note [reshard] in merge.cpp), laid out by this run's config.
// So a run resumed either way continues identically. The chunk layout comes from the GPT that the
// config describes; another model resumes on the number of ranks that wrote its checkpoint.
TensorMap Trainer::Impl::resharded_tensors(const std::string& dir,
                                           const CheckpointManifest& manifest) {
  PSTAR_CHECK(config.engine.mode == config::EngineMode::kChunked, ConfigError, "--resume ", dir,
              ": the checkpoint was written by ", manifest.world_size,
              " rank(s); resharding it for ", world, " is for the chunk engine");
  try {
    (void)model::resolve_gpt_config(config.model);
  } catch (const Error& e) {
    PSTAR_THROW(ConfigError, "--resume ", dir, ": the checkpoint was written by ",
                manifest.world_size, " rank(s) but this run has ", world,
                "; resharding follows a GPT's chunk layout, and this model is not one (", e.what(),
                "); resume with --nproc ", manifest.world_size);
  }
  std::vector<std::string> files;
  for (int64_t q = 0; q < manifest.world_size; ++q) files.push_back(checkpoint_file(dir, q));
  IndexOptions options;
  options.verify = false;  // every file was checked just now, by one of the ranks
  options.label = "resume";
  const CheckpointIndex index = index_checkpoint(files, manifest.world_size, options);
  const TensorList mine = resharded_rank_tensors(index, config, world, rank);
  if (rank == 0) {
    log::info("resume: resharding ", dir, " from the ", manifest.world_size,
              " rank(s) that wrote it to this run's ", world,
              " (as pstar merge-ckpt --reshard would; Note [resume resharding])");
  }
  return TensorMap(mine.begin(), mine.end());
}

void Trainer::Impl::start_profile() {
  profiler = std::make_unique<Profiler>();
  PSTAR_CHECK(engine->set_observer(profiler.get()), ConfigError,
              "--profile records the chunk engine's chunks; ", "engine.mode \"",
              config::engine_mode_name(config.engine.mode),
              "\" has none (use engine.mode \"chunked\")");
  {
    // Find out now, not after the whole run, that the file cannot be written.
    const std::string path = rank_path(options.profile_path);
    const bool existed = std::filesystem::exists(path);
    std::FILE* probe = std::fopen(path.c_str(), "ab");
    PSTAR_CHECK(probe != nullptr, IoError, "--profile: cannot create ", path, ": ",
                std::strerror(errno));
    std::fclose(probe);
    if (!existed) std::filesystem::remove(path);
  }
  formats::ProfileRun& run = profiler->data().run;
  run.config_json = config::to_json_text(config);
  run.pstar_version = version();
  run.torch_version = compat::torch_version();
  run.precision = dtype == torch::kFloat32 ? "fp32" : dtype == torch::kBFloat16 ? "bf16" : "fp16";
  const std::time_t now = std::time(nullptr);
  char created[32];
  std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  run.created = created;
}

void Trainer::Impl::init(std::unique_ptr<ParamEngine> prebuilt) {
  core::configure_runtime(comm != nullptr ? comm->world().local_world_size : 1);
  // `pstar train` passes a config its plan resolved already (train()); a Trainer made directly
  // (tests, programs over the library) is resolved here, by the same function (Note [run plan]).
  const plan::RunPlan plan = plan_run(config, options.device, comm);
  for (const std::string& line : plan.decisions) log::info(line);
  config = plan.config;
  device = plan_device(plan);
  dtype = plan_dtype(plan);
  const bool chunked = plan.chunked;
  check_dtype_supported(dtype, device);

  const int64_t seq_len = model->max_seq_len();
  source = data::open_token_source(config.data, model->vocab_size(), seq_len);
  sampler = std::make_unique<data::BatchSampler>(
      *source, data::parse_sampling(config.data.sampling), config.train_micro_batch_size_per_gpu,
      seq_len, config.gradient_accumulation_steps, config.training.seed, rank, world);

  if (auto* gpt = dynamic_cast<model::Gpt*>(model.get())) {
    gpt->set_activation_checkpointing(config.engine.activation_checkpointing);
  } else if (config.engine.activation_checkpointing) {
    log::warn("engine.activation_checkpointing: this model does not support it; ignored");
  }

  int64_t num_params = 0;
  for (auto& p : model->parameters()) num_params += p.numel();
  if (prebuilt) {
    engine = std::move(prebuilt);
  } else if (chunked) {
    // A model built outside the engine is taken into chunks module by module after the fact.
    auto chunk_engine =
        std::make_unique<ChunkedEngine>(plan, ChunkedEngine::leaf_modules(*model),
                                        /*predicted_non_model=*/0, comm, make_tier(plan, 0));
    chunk_engine->register_unit(*model, "");
    chunk_engine->finish_registration();
    engine = std::move(chunk_engine);
  } else {
    engine = engine::make_torch_engine(plan, *model);
  }
  if (engine->num_parameters() >= 0) num_params = engine->num_parameters();
  if (!options.metrics_path.empty()) metrics.emplace(rank_path(options.metrics_path));
  if (!options.profile_path.empty()) start_profile();
  check_save_dir();
  // Rank 0 names the run; checkpoint manifests record it.
  run_id = comm != nullptr ? comm->exchange("run_id", new_run_id())[0] : new_run_id();
  if (!options.resume_dir.empty()) resume(options.resume_dir);

  log::info("model: ", human_count(static_cast<double>(num_params)), " parameters (", num_params,
            "), vocab ", model->vocab_size(), ", seq_len ", seq_len);
  log::info("engine: ", engine->describe(), "; compute on ", device.str(), " (",
            torch::get_num_threads(), " threads), precision ",
            dtype == torch::kFloat32 ? "fp32" : c10::toString(dtype), ", LibTorch ",
            compat::torch_version());
  log::info("data: ", source->describe(), " (", human_count(static_cast<double>(source->size())),
            " tokens, ", config.data.sampling, " sampling), ", tokens_per_step(),
            " tokens per step (", world > 1 ? str_cat(world, " ranks x ") : std::string(),
            config.train_micro_batch_size_per_gpu, " x ", seq_len, " x ",
            config.gradient_accumulation_steps, " accumulation)");
}

Trainer::Trainer(const config::TrainConfig& config, std::shared_ptr<model::CausalLM> model,
                 const TrainOptions& options)
    : impl_(std::make_unique<Impl>(config, std::move(model), options)) {
  impl_->init(nullptr);
}

Trainer::Trainer(const config::TrainConfig& config, ModelAndEngine built,
                 const TrainOptions& options)
    : impl_(std::make_unique<Impl>(config, std::move(built.model), options)) {
  impl_->init(std::move(built.engine));
}

Trainer::~Trainer() = default;

int64_t Trainer::steps_done() const { return impl_->step; }

StepMetrics Trainer::step() { return *impl_->run_step(/*may_abandon=*/false); }

std::optional<StepMetrics> Trainer::Impl::run_step(bool may_abandon) {
  try {
    return train_step(may_abandon);
  } catch (const c10::OutOfMemoryError& e) {
    // LibTorch's allocator (activations, temporaries) ran out; chunk payloads are pstar's own and
    // fail with pstar's OutOfMemoryError. Checkpoints are written only between steps, so the last
    // one is intact.
    std::string what = e.what_without_backtrace();
    what = what.substr(0, what.find('\n'));
    PSTAR_THROW(OutOfMemoryError, "step ", step, ": ", device.str(),
                " ran out of memory for activations and temporaries: ", what,
                "; lower train_micro_batch_size_per_gpu or turn on "
                "engine.activation_checkpointing",
                config.engine.mode == config::EngineMode::kChunked
                    ? ", or lower engine.device_memory so that chunks leave LibTorch more"
                    : "",
                last_saved_dir.empty()
                    ? std::string()
                    : str_cat(". The last checkpoint, ", last_saved_dir, ", is intact"));
  }
}

std::optional<StepMetrics> Trainer::Impl::train_step(bool may_abandon) {
  if (!start) start = Clock::now();
  const auto step_start = Clock::now();
  const bool abandonable = may_abandon && config.gradient_accumulation_steps > 1;
  if (abandonable) step_rng = at::detail::getDefaultCPUGenerator().get_state();
  ++step;
  const int64_t accumulation = config.gradient_accumulation_steps;
  const double loss_scale = config.fp16.enabled ? scaler.scale() : 1.0;
  const int64_t vocab = model->vocab_size();

  model->train();
  const bool profiled = profiler != nullptr && step >= options.profile_from_step;
  if (profiled) profiler->begin_step(step);
  StepTimes times;
  engine->begin_step();
  // Without clipping or loss scaling the update is known before the backward: the engine may start
  // it as gradients become final (Note [host adam overlap]).
  if (config.gradient_clipping <= 0 && !config.fp16.enabled)
    engine->expect_update(schedule.at(step), 1.0);
  double loss_sum = 0;
  {
    model::ScopedModuleHooks hooks(engine->hooks());
    for (int64_t micro = 1; micro <= accumulation; ++micro) {
      auto batch = sampler->batch(step, micro);
      auto inputs = batch.inputs.to(device), targets = batch.targets.to(device);
      const auto forward_start = Clock::now();
      auto logits = model->forward(inputs);
      PSTAR_CHECK(logits.dim() == 3 && logits.size(0) == inputs.size(0) &&
                      logits.size(1) == inputs.size(1) && logits.size(2) == vocab,
                  ConfigError, "the model's forward returned logits of shape ", logits.sizes(),
                  "; expected [batch, seq, vocab_size] = ", inputs.sizes(), " x ", vocab);
      auto loss = torch::nn::functional::cross_entropy(
          logits.reshape({-1, vocab}).to(torch::kFloat32), targets.reshape({-1}));
      loss_sum += loss.item<double>();
      const auto backward_start = Clock::now();
      times.forward_s += std::chrono::duration<double>(backward_start - forward_start).count();
      (loss * (loss_scale / static_cast<double>(accumulation))).backward();
      engine->end_micro_batch();
      times.backward_s += seconds_since(backward_start);
      double rest_s = 0;
      if (abandonable && micro < accumulation &&
          abandon_step(times.forward_s + times.backward_s, micro, &rest_s)) {
        --step;
        at::Generator generator = at::detail::getDefaultCPUGenerator();
        generator.set_state(step_rng);
        log::end_status();
        log::info("stop requested: abandoning step ", step + 1, " after ", micro, " of ",
                  accumulation, " micro-batches (finishing it would take about ",
                  human_duration(rest_s), ")");
        return std::nullopt;
      }
    }
  }
  // The logged loss is the mean over the global batch: every rank's share is the same size.
  if (comm != nullptr) loss_sum = comm->all_reduce_sum(loss_sum);
  const double loss = loss_sum / static_cast<double>(accumulation * world);

  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.loss_scale = loss_scale;
  m.lr = schedule.at(step);
  // The loss scale only touches gradients: a non-finite loss is divergence, not overflow.
  PSTAR_CHECK(std::isfinite(loss), NumericError, "step ", step, ": the loss is not finite (", loss,
              "); lower optimizer.params.lr, set gradient_clipping, or train in fp32",
              last_checkpoint_hint());
  const auto optimizer_start = Clock::now();
  m.grad_norm = engine->grad_norm(loss_scale);
  if (!std::isfinite(m.grad_norm) && config.fp16.enabled && scaler.is_dynamic()) {
    m.skipped = true;
    m.lr = 0;  // no update was made
    ++skipped;
    log::warn("step ", step, ": gradient overflow at loss scale ", loss_scale, "; step skipped (",
              skipped, skipped == 1 ? " step" : " steps", " skipped so far)");
  } else {
    PSTAR_CHECK(std::isfinite(m.grad_norm), NumericError, "step ", step,
                ": the gradient norm is not finite (loss ", loss,
                "); lower optimizer.params.lr, set gradient_clipping, or train in fp32",
                last_checkpoint_hint());
    double multiplier = 1.0 / loss_scale;
    if (config.gradient_clipping > 0 && m.grad_norm > config.gradient_clipping)
      multiplier *= config.gradient_clipping / (m.grad_norm + 1e-6);
    engine->update(m.lr, multiplier);
  }
  if (config.fp16.enabled) scaler.update(m.skipped);
  engine->end_step();
  times.optimizer_s = seconds_since(optimizer_start);
  engine->fill_metrics(m.engine);

  tokens += tokens_per_step();
  m.tokens = tokens;
  m.step_time_s = seconds_since(step_start);
  m.tokens_per_s = static_cast<double>(tokens_per_step()) / std::max(m.step_time_s, 1e-9);
  m.elapsed_s = seconds_since(*start);
  if (metrics) metrics->write(m);
  if (profiled) profiler->end_step(m, times);
  const auto& t = config.training;
  if (!t.save_dir.empty() && t.save_interval > 0 &&
      (step % t.save_interval == 0 || step == t.steps))
    save_checkpoint();
  return m;
}

TrainSummary Trainer::run() {
  Impl& s = *impl_;
  const int64_t total = s.config.training.steps;
  TrainSummary summary;
  if (s.step >= total) {
    log::info("nothing to train: already at step ", s.step, " of training.steps ", total);
    return summary;
  }
  log::info("training ", total - s.step, " steps");
  int64_t device_peak = -1, host_peak = -1, moved = 0, adam_device = -1;
  const auto run_start = Clock::now();
  const int64_t tokens_before = s.tokens;
  while (s.step < total) {
    std::optional<StepMetrics> done = s.run_step(/*may_abandon=*/true);
    if (!done) {
      s.stop_after(s.step);
      break;
    }
    const StepMetrics& m = *done;
    device_peak = std::max(device_peak, m.engine.device_peak_bytes);
    host_peak = std::max(host_peak, m.engine.host_peak_bytes);
    moved += std::max<int64_t>(0, m.engine.moved_h2d_bytes) +
             std::max<int64_t>(0, m.engine.moved_d2h_bytes);
    adam_device = m.engine.adam_device_chunks;
    if (summary.steps == 0) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    ++summary.steps;
    if (s.options.progress) {
      const double per_step = seconds_since(run_start) / static_cast<double>(summary.steps);
      const double eta = per_step * static_cast<double>(total - m.step);
      char line[256];
      std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  lr %.2e  %s tok/s  %s  ETA %s",
                    static_cast<long long>(m.step), static_cast<long long>(total), m.loss, m.lr,
                    human_count(m.tokens_per_s).c_str(), human_duration(m.elapsed_s).c_str(),
                    human_duration(eta).c_str());
      if (m.step % s.config.training.log_interval == 0 || m.step == 1 || m.step == total) {
        log::end_status();
        log::info(line);
      } else {
        log::status(line);
      }
    }
    if (m.step < total && s.agree_to_stop()) {
      s.stop_after(m.step);
      break;
    }
  }
  log::end_status();
  if (s.profiler) {
    const std::string path = s.rank_path(s.options.profile_path);
    s.profiler->write(path);
    log::info("profile: ", path, " (", s.profiler->data().steps.size(), " steps, ",
              s.profiler->data().by_moment.size(), " moments, ", s.profiler->data().events.size(),
              " chunk events)");
  }
  summary.skipped_steps = s.skipped;
  summary.stop_signal = s.stop_signal;
  summary.tokens = s.tokens - tokens_before;
  summary.elapsed_s = seconds_since(run_start);
  summary.tokens_per_s = static_cast<double>(summary.tokens) / std::max(summary.elapsed_s, 1e-9);
  if (device_peak >= 0) {
    log::info("chunk engine: device peak ", format_bytes(device_peak), ", host peak ",
              format_bytes(host_peak), ", moved ",
              format_bytes(moved / std::max<int64_t>(1, summary.steps)),
              " per step on average, Adam on the device for ", adam_device, " chunk(s)");
  }
  log::info(s.stop_signal != 0 ? "stopped: " : "done: ", summary.steps, " steps, ",
            human_count(static_cast<double>(summary.tokens)), " tokens in ",
            human_duration(summary.elapsed_s), " (", human_count(summary.tokens_per_s),
            " tok/s); loss ", fixed4(summary.first_loss), " -> ", fixed4(summary.last_loss),
            summary.skipped_steps ? str_cat("; ", summary.skipped_steps, " skipped") : "");
  return summary;
}

std::shared_ptr<model::CausalLM> build_model(const config::TrainConfig& config) {
  auto shape = model::resolve_gpt_config(config.model);
  torch::manual_seed(config.training.seed);
  auto gpt = std::make_shared<model::Gpt>(shape);
  if (!config.model.init_from.empty())
    model::load_hf_gpt2_safetensors(*gpt, config.model.init_from);
  return gpt;
}

ModelAndEngine build_model_and_engine(const plan::RunPlan& plan, dist::Communicator* comm) {
  const config::TrainConfig& config = plan.config;
  if (config.engine.mode != config::EngineMode::kChunked)
    return ModelAndEngine{build_model(config), nullptr};
  auto shape = model::resolve_gpt_config(config.model);
  const int64_t non_model =
      plan::estimate_gpt_activations(plan::gpt_activation_input(config, shape)).peak;
  auto engine = std::make_unique<ChunkedEngine>(plan, plan::gpt_leaf_modules(shape), non_model,
                                                comm, make_tier(plan, non_model));
  torch::manual_seed(config.training.seed);
  auto gpt =
      std::make_shared<model::Gpt>(shape, [&](torch::nn::Module& unit, const std::string& prefix) {
        engine->register_unit(unit, prefix);
      });
  engine->finish_registration();
  if (!config.model.init_from.empty()) {
    model::load_hf_gpt2_safetensors(*gpt, config.model.init_from,
                                    [&](const std::string& name, const at::Tensor& value) {
                                      engine->load_parameter(name, value);
                                    });
  }
  return ModelAndEngine{gpt, std::move(engine)};
}

TrainSummary train(const config::TrainConfig& config, const TrainOptions& options) {
  const dist::WorldInfo world = dist::detect_world();
  std::unique_ptr<dist::Communicator> comm;
  TrainOptions run_options = options;
  if (world.distributed()) {
    log::set_rank(static_cast<int>(world.rank), static_cast<int>(world.world_size));
    // One rank speaks for the run; the others report only warnings and errors.
    if (world.rank != 0 && log::level() < log::Level::kWarn) log::set_level(log::Level::kWarn);
    run_options.progress = options.progress && world.rank == 0;
    log::info("rank ", world.rank, " of ", world.world_size, " (", world.launcher,
              "), rendezvous at ", world.master_addr, ":", world.port);
    comm = std::make_unique<dist::Communicator>(world, options.dist_timeout);
    check_same_config(*comm, config);
    run_options.comm = comm.get();
  }
  log::info("config: ", config.source);
  core::configure_runtime(world.local_world_size);  // before the precision probe, which it times
  // The run's shape, decided once (Note [run plan]); the Trainer finds nothing left to decide.
  const plan::RunPlan plan = plan_run(config, options.device, comm.get());
  for (const std::string& line : plan.decisions) log::info(line);
  const config::TrainConfig& resolved = plan.config;
  ModelAndEngine built = build_model_and_engine(plan, comm.get());
  // Every rank built the same initial model from training.seed; from here on (dropout) each
  // rank draws its own numbers. Rank 0 keeps the stream a single-rank run would.
  if (world.rank > 0) torch::manual_seed(config.training.seed + 7919 * world.rank);
  Trainer trainer(resolved, std::move(built), run_options);
  return trainer.run();
}

}  // namespace pstar::train
