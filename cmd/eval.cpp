// `pstar eval CONFIG.json [--resume DIR]`: the held-out loss of a checkpoint (or of the initial
// model), with the windows training evaluates (docs/training.md#held-out-loss).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "pstar/core/log.h"
#include "pstar/dist/world.h"
#include "pstar/formats/config.h"
#include "pstar/train/trainer.h"

namespace pstar::cmd {

void register_eval(CLI::App& app) {
  auto options = std::make_shared<EvalCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "The held-out loss (data.eval or data.eval_fraction) of a checkpoint: --resume DIR, else "
      "of the model the config starts from; prints one JSON line");
  sub->add_option("config", options->config_path, "Training config (JSON)")->required();
  sub->add_option("--set", options->overrides,
                  "Override a config key: KEY=VALUE, as for `pstar train`. Repeatable.")
      ->allow_extra_args(false);
  sub->add_option("--resume", options->resume_dir,
                  "The checkpoint: a step directory, or a training.save_dir (its newest)");
  sub->add_option("--device", options->device, "Compute device")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub->add_flag("-q,--quiet", options->quiet, "Only warnings, errors and the result line");
  sub->add_option("--tensorboard", options->tensorboard_dir,
                  "Also write the held-out loss (tag eval/loss, at the checkpoint's step) to a "
                  "TensorBoard event file in this directory (training.tensorboard_dir)");
  sub->add_option("--nproc", options->nproc,
                  "Start N local ranks, each evaluating a share of the windows")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sub->add_option("--master-port", options->master_port, "With --nproc: the rendezvous port");
  sub->add_option("--dist-timeout", options->dist_timeout_s,
                  "Seconds a rank waits for the others before stopping with an error")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}))
      ->capture_default_str();
  sub->callback([options] {
    if (const int code = run_eval(*options); code != 0) std::exit(code);
  });
}

int run_eval(const EvalCommandOptions& options) {
  if (options.nproc > 0) {
    std::vector<std::string> args{"eval", options.config_path};
    for (const auto& set : options.overrides) args.insert(args.end(), {"--set", set});
    args.insert(args.end(), {"--device", options.device});
    if (!options.resume_dir.empty()) args.insert(args.end(), {"--resume", options.resume_dir});
    if (options.quiet) args.emplace_back("--quiet");
    if (!options.tensorboard_dir.empty())
      args.insert(args.end(), {"--tensorboard", options.tensorboard_dir});
    args.insert(args.end(), {"--dist-timeout", std::to_string(options.dist_timeout_s)});
    return launch_local(options.nproc, args, options.master_port);
  }
  const config::TrainConfig config = config::load_train_config(
      options.config_path, with_tensorboard_dir(options.overrides, options.tensorboard_dir));
  if (options.quiet) log::set_level(log::Level::kWarn);
  train::TrainOptions eval_options;
  eval_options.device = options.device;
  eval_options.progress = false;
  eval_options.resume_dir = options.resume_dir;
  eval_options.dist_timeout = std::chrono::seconds(options.dist_timeout_s);
  const train::EvalSummary summary = train::evaluate(config, eval_options);
  if (dist::detect_world().rank == 0) {
    const nlohmann::json line = {{"step", summary.step},
                                 {"eval_loss", summary.loss},
                                 {"windows", summary.windows},
                                 {"elapsed_s", summary.elapsed_s}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace pstar::cmd
