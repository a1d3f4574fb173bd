// Profile set-up: `pstar train --profile` records the chunk engine's steps into a formats::Profile
// (profiler.h; docs/profile.md).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>

#include "pstar/base/error.h"
#include "pstar/base/version.h"
#include "pstar/core/torch_compat.h"
#include "pstar/formats/config.h"
#include "pstar/formats/profile.h"
#include "trainer_impl.h"

namespace pstar::train {

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

}  // namespace pstar::train
