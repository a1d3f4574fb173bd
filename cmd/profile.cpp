// `pstar profile CONFIG -o FILE.h5`: a short run that records what the chunk engine does. It is
// `pstar train` with a profile, the warm-up plus --steps steps, recording only those steps (the
// warm-up places chunks differently) and writing no checkpoints.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "pstar/formats/config.h"
#include "pstar/formats/profile.h"

namespace pstar::cmd {

void register_profile(CLI::App& app) {
  auto options = std::make_shared<ProfileCommandOptions>();
  // A build without HDF5 keeps the subcommand, so that users learn it exists; run_profile says
  // what is missing.
  CLI::App* sub = app.add_subcommand(
      "profile",
      std::string("Train a few steps of CONFIG.json and record chunk moves and memory to HDF5") +
          (formats::profile_io_built() ? "" : " (not in this build: it has no HDF5)"));
  sub->add_option("config", options->config_path, "Training config (JSON)")->required();
  sub->add_option("-o,--output", options->output, "Profile file to write (HDF5, e.g. run.h5)")
      ->required();
  sub->add_option("--steps", options->steps, "Steps to record after the warm-up")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  sub->add_option("--set", options->overrides, "Override a config key: KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--metrics", options->metrics_path, "Also write per-step metrics (JSON Lines)");
  sub->add_option("--device", options->device, "Compute device")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub->add_option("--nproc", options->nproc, "Profile N local ranks (each writes its own file)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sub->add_flag("-q,--quiet", options->quiet, "Only warnings and errors");
  sub->callback([options] {
    if (const int code = run_profile(*options); code != 0) std::exit(code);
  });
}

int run_profile(const ProfileCommandOptions& o) {
  formats::require_profile_io("pstar profile");
  // The config as given decides the warm-up length; errors in it surface here, once. This
  // process trains from it; ranks started by --nproc read it again with the overrides below.
  config::TrainConfig config = config::load_train_config(o.config_path, o.overrides);
  const int64_t warmup = config.engine.warmup_iterations;
  TrainCommandOptions train;
  train.config_path = o.config_path;
  train.overrides = o.overrides;
  train.overrides.push_back("training.steps=" + std::to_string(warmup + o.steps));
  // A profile run leaves no checkpoints, not even when it is stopped by a signal.
  train.overrides.push_back("training.save_interval=0");
  train.overrides.push_back("training.save_dir=");
  train.metrics_path = o.metrics_path;
  train.device = o.device;
  train.quiet = o.quiet;
  train.nproc = o.nproc;
  train.profile_path = o.output;
  train.profile_from = warmup + 1;
  if (o.nproc > 0) return run_train(train);
  // What the overrides above set, on the config parsed once (none of them is checked against
  // another key, so the values are all validation would look at).
  config.training.steps = warmup + o.steps;
  config.training.save_interval = 0;
  config.training.save_dir.clear();
  return run_train_config(config, train);
}

}  // namespace pstar::cmd
