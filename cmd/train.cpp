// `pstar train CONFIG.json`: trains a model as the config describes.
#include <memory>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
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
  sub->add_option("--device", options->device, "Compute device")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub->add_option(
      "--resume", options->resume_dir,
      "Continue from a checkpoint: a step directory, or a training.save_dir (its newest "
      "checkpoint)");
  sub->add_flag("-q,--quiet", options->quiet, "Only warnings and errors; no progress line");
  sub->callback([options] { run_train(*options); });
}

int run_train(const TrainCommandOptions& options) {
  if (options.quiet) log::set_level(log::Level::kWarn);
  auto config = config::load_train_config(options.config_path, options.overrides);
  train::TrainOptions train_options;
  train_options.device = options.device;
  train_options.metrics_path = options.metrics_path;
  train_options.progress = !options.quiet;
  train_options.resume_dir = options.resume_dir;
  train::train(config, train_options);
  return 0;
}

}  // namespace pstar::cmd
