// `pstar visualize` in builds without PLplot (PSTAR_WITH_PLPLOT, cmake/dependencies.cmake), in
// place of visualize.cpp: the subcommand is still listed, so that users learn it exists, and
// whatever it is given, it says what this build lacks and how to get a build that has it.
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/formats/profile.h"

namespace pstar::cmd {

void register_visualize(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "visualize", std::string("Draw a figure of a profile file as PNG, SVG or PDF (not in this "
                               "build: it has no ") +
                       (formats::profile_io_built() ? "PLplot)" : "HDF5 and no PLplot)"));
  // The options are visualize.cpp's. Here the arguments are not parsed at all, so that any command
  // line, complete or not, gets the reason run_visualize gives rather than a complaint about one.
  sub->allow_extras();
  sub->callback([] { run_visualize(VisualizeCommandOptions{}); });
}

int run_visualize(const VisualizeCommandOptions&) {
  // PLplot is never on without HDF5 (cmake/dependencies.cmake): a build without HDF5 lacks both.
  if (!formats::profile_io_built())
    PSTAR_THROW(ConfigError,
                "pstar visualize: this build of pstar has no HDF5 profile support and no PLplot, "
                "with which it reads profiles and draws them. Install libhdf5-dev, libplplot-dev "
                "and plplot-driver-cairo (scripts/setup-deps.sh installs them) and reconfigure "
                "with -DPSTAR_WITH_HDF5=ON -DPSTAR_WITH_PLPLOT=ON (docs/profile.md).");
  PSTAR_THROW(ConfigError,
              "pstar visualize: this build of pstar has no PLplot, with which it draws its "
              "figures. Install libplplot-dev and plplot-driver-cairo (scripts/setup-deps.sh "
              "installs them) and reconfigure with -DPSTAR_WITH_PLPLOT=ON (docs/profile.md).");
}

}  // namespace pstar::cmd
