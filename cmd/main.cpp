// The pstar binary: parse -> run the chosen subcommand -> map errors to one line and an exit code.
#include <cstdio>
#include <exception>

#include <c10/util/Exception.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/base/version.h"
#include "pstar/core/log.h"
#include "pstar/dist/communicator.h"
#include "pstar/formats/profile.h"
#include "pstar/tier/device_tier.h"

int main(int argc, char** argv) {
  CLI::App app{"pstar: train large transformer models with chunk-based heterogeneous memory"};
  app.name("pstar");
  app.require_subcommand(1);
  // What this build can do, for bug reports and for scripts that need a feature (gpt_bench.sh
  // checks for the CUDA device tier, and for the NCCL communicator before it runs several GPUs).
  app.set_version_flag("--version", [] {
    const std::string nccl_missing = pstar::dist::nccl_missing_reason();
    return pstar::str_cat(
        "pstar ", pstar::version(), "\nLibTorch ", TORCH_VERSION,
        "\nCUDA device tier: ", pstar::tier::cuda_tier_built() ? "built" : "not built",
        "\nNCCL communicator: ",
        nccl_missing.empty() ? "built" : "not built (" + nccl_missing + ")",
        "\nHDF5 profiles: ", pstar::formats::profile_io_built() ? "built" : "not built");
  });
  pstar::cmd::register_train(app);
  pstar::cmd::register_eval(app);
  pstar::cmd::register_profile(app);
  pstar::cmd::register_estimate(app);
  pstar::cmd::register_merge_ckpt(app);
  pstar::cmd::register_generate(app);
  pstar::cmd::register_visualize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const pstar::Error& e) {
    pstar::log::error(pstar::error_kind_name(e.kind()), ": ", e.what());
    return pstar::error_exit_code(e.kind());
  } catch (const c10::Error& e) {
    // A LibTorch failure we did not anticipate: report its message without the C++ backtrace.
    pstar::log::error("LibTorch error: ", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    pstar::log::error(e.what());
    return 1;
  }
  return 0;
}
