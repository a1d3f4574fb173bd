// `pstar train CONFIG.json`: trains a model as the config describes.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "pstar/core/log.h"
#include "pstar/core/stop.h"
#include "pstar/formats/config.h"
#include "pstar/formats/profile.h"
#include "pstar/train/trainer.h"

namespace pstar::cmd {

void register_train(CLI::App& app) {
  auto options = std::make_shared<TrainCommandOptions>();
  CLI::App* sub =
      app.add_subcommand("train", "Train a model as CONFIG.json describes (see docs/config.md)");
  sub->add_option("config", options->config_path, "Training config (JSON)")
      ->required();  // existence is checked by the config loader, which reports an I/O error
  sub->add_option("--set", options->overrides,
                  "Override a config key: KEY=VALUE, KEY a dotted path (e.g. training.steps=50), "
                  "VALUE parsed as JSON or else taken as a string. Repeatable.")
      ->allow_extra_args(false);  // one KEY=VALUE per --set, so the config path may follow
  sub->add_option("--metrics", options->metrics_path,
                  "Write one JSON object per optimizer step to this file (JSON Lines)");
  sub->add_option("--tensorboard", options->tensorboard_dir,
                  "Write a TensorBoard event file of the run into this directory "
                  "(training.tensorboard_dir); `tensorboard --logdir DIR` shows it");
  sub->add_option("--device", options->device, "Compute device")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub->add_option(
      "--resume", options->resume_dir,
      "Continue from a checkpoint: a step directory, or a training.save_dir (its newest "
      "checkpoint)");
  sub->add_flag("-q,--quiet", options->quiet, "Only warnings and errors; no progress line");
  sub->add_option("--profile", options->profile_path,
                  std::string("Record what the chunk engine does into this HDF5 file "
                              "(docs/profile.md); `pstar visualize` plots it") +
                      (formats::profile_io_built() ? "" : " (not in this build: it has no HDF5)"));
  sub->add_option("--profile-from", options->profile_from,
                  "With --profile: the first step to record")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--nproc", options->nproc,
                  "Start N local ranks that share the chunks (ZeRO over c10d/Gloo); without it, "
                  "a run under torchrun or srun joins its ranks by itself")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sub->add_option("--master-port", options->master_port,
                  "With --nproc: the rendezvous port on 127.0.0.1 (default: MASTER_PORT, else a "
                  "free port)");
  sub->add_option("--dist-timeout", options->dist_timeout_s,
                  "Seconds a rank waits for the others (rendezvous, collectives) before stopping "
                  "with an error")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}))
      ->capture_default_str();
  sub->add_option("--step-bound", options->step_bound,
                  "After the run, measure the machine's rates and log the steady step against "
                  "its physical bound (docs/training.md); auto: the chunk engine on a GPU")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  sub->callback([options] {
    // The launcher's status is its first failing rank's: pass it on as the process's own.
    if (const int code = run_train(*options); code != 0) std::exit(code);
  });
}

namespace {

// The same command for each rank, without --nproc.
std::vector<std::string> rank_args(const TrainCommandOptions& o) {
  std::vector<std::string> args{"train", o.config_path};
  for (const auto& set : o.overrides) args.insert(args.end(), {"--set", set});
  if (!o.metrics_path.empty()) args.insert(args.end(), {"--metrics", o.metrics_path});
  if (!o.tensorboard_dir.empty()) args.insert(args.end(), {"--tensorboard", o.tensorboard_dir});
  args.insert(args.end(), {"--device", o.device});
  if (!o.resume_dir.empty()) args.insert(args.end(), {"--resume", o.resume_dir});
  if (o.quiet) args.emplace_back("--quiet");
  if (!o.profile_path.empty())
    args.insert(args.end(),
                {"--profile", o.profile_path, "--profile-from", std::to_string(o.profile_from)});
  args.insert(args.end(), {"--dist-timeout", std::to_string(o.dist_timeout_s)});
  args.insert(args.end(), {"--step-bound", o.step_bound});
  return args;
}

}  // namespace

int run_train(const TrainCommandOptions& options) {
  // Before the ranks start and the config loads: a build without HDF5 says so at once.
  if (!options.profile_path.empty()) formats::require_profile_io("pstar train --profile");
  if (options.nproc > 0)
    return launch_local(options.nproc, rank_args(options), options.master_port);
  return run_train_config(
      config::load_train_config(options.config_path,
                                with_tensorboard_dir(options.overrides, options.tensorboard_dir)),
      options);
}

std::vector<std::string> with_tensorboard_dir(std::vector<std::string> overrides,
                                              const std::string& dir) {
  // A JSON string, so that a directory named like a number or `true` stays a string.
  if (!dir.empty()) overrides.push_back("training.tensorboard_dir=" + nlohmann::json(dir).dump());
  return overrides;
}

int run_train_config(const config::TrainConfig& config, const TrainCommandOptions& options) {
  if (options.quiet) log::set_level(log::Level::kWarn);
  train::TrainOptions train_options;
  train_options.device = options.device;
  train_options.metrics_path = options.metrics_path;
  train_options.progress = !options.quiet;
  train_options.resume_dir = options.resume_dir;
  train_options.dist_timeout = std::chrono::seconds(options.dist_timeout_s);
  train_options.profile_path = options.profile_path;
  train_options.profile_from_step = options.profile_from;
  if (options.step_bound != "auto") train_options.step_bound = options.step_bound == "on";
  // SIGINT/SIGTERM: finish the step, save, and exit 128 + the signal (docs/cli.md).
  core::StopSignals stop_signals;
  const train::TrainSummary summary = train::train(config, train_options);
  return summary.stop_signal != 0 ? 128 + summary.stop_signal : 0;
}

}  // namespace pstar::cmd
