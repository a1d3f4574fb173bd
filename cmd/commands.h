// The pstar subcommands. Each lives in its own file with an options struct, a register function
// that adds it to the CLI, and a run function that calls the engine (tests may call run directly).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pstar::cmd {

struct TrainCommandOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  std::string metrics_path;
  std::string device = "auto";
  std::string resume_dir;
  bool quiet = false;
};

void register_train(CLI::App& app);
int run_train(const TrainCommandOptions& options);

}  // namespace pstar::cmd
