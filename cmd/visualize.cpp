// `pstar visualize PROFILE.h5 --fig memory|location|moves|timeline -o OUT.png|svg|pdf`: draws one
// figure of a profile file (docs/profile.md) with PLplot's C API through its cairo drivers.
// Its parts: visualize_parts.h.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "pstar/formats/file_guard.h"
#include "pstar/formats/profile.h"
#include "visualize_parts.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using namespace visualize_parts;  // the command's own parts (visualize_parts.h)

// ---- output file -------------------------------------------------------------------------------

const char* output_device(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".png") return "pngcairo";
  if (ext == ".svg") return "svgcairo";
  if (ext == ".pdf") return "pdfcairo";
  PSTAR_THROW(
      ConfigError, "-o: '", path, "': ",
      ext.empty() ? std::string("no file extension") : "unknown output extension '" + ext + "'",
      "; use .png, .svg or .pdf");
}

// The figure is drawn into a temporary file next to the output and renamed over it once complete,
// so a failed run never leaves a truncated figure under the output's name.
class TempOutput {
 public:
  explicit TempOutput(std::string target) : temp_(std::move(target)) {
    // Opened here so an unwritable path is a clear I/O error; PLplot would exit the process.
    std::FILE* f = std::fopen(temp_.path().c_str(), "wb");
    PSTAR_CHECK(f != nullptr, IoError, "cannot write output file '", temp_.target(),
                "': ", std::strerror(errno));
    std::fclose(f);
  }

  const std::string& path() const { return temp_.path(); }

  void commit() {
    std::error_code ec;
    const auto size = fs::file_size(temp_.path(), ec);
    PSTAR_CHECK(!ec && size > 0, IoError, "writing output file '", temp_.target(),
                "' failed: PLplot wrote nothing", ec ? " (" + ec.message() + ")" : "");
    temp_.publish("figure");
  }

 private:
  formats::TempPath temp_;  // Note [publish by rename]
};

}  // namespace

void register_visualize(CLI::App& app) {
  auto o = std::make_shared<VisualizeCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "visualize", "Draw a figure of a profile file as PNG, SVG or PDF (see docs/cli.md)");
  sub->add_option("profile", o->profile_path,
                  "Profile file (HDF5) written by pstar profile or pstar train --profile")
      ->required();
  sub->add_option("--fig", o->figure,
                  "memory: one tier's memory by moment; location (or access, PatrickStar's "
                  "name): where each chunk's payloads are at each moment; moves: bytes moved per "
                  "moment; timeline: memory over wall time")
      ->required()
      ->check(CLI::IsMember({"memory", "location", "access", "moves", "timeline"}));
  sub->add_option("--tier", o->tier,
                  "Memory tier for --fig memory (default device) and timeline (default: both "
                  "tiers' totals)")
      ->check(CLI::IsMember({"device", "host"}));
  sub->add_option("-o,--output", o->output_path,
                  "Output file; .png (1200x700 pixels), .svg or .pdf chooses the format. "
                  "Default: PROFILE-stem-FIG.png beside the profile (run.h5 -> run-memory.png)");
  sub->callback([o] { run_visualize(*o); });
}

std::string visualize_default_output(const VisualizeCommandOptions& o) {
  const fs::path profile(o.profile_path);
  return (profile.parent_path() / (profile.stem().string() + "-" + o.figure + ".png")).string();
}

int run_visualize(const VisualizeCommandOptions& options) {
  VisualizeCommandOptions o = options;
  if (o.output_path.empty()) o.output_path = visualize_default_output(o);
  // PatrickStar calls the chunk-location figure "access"; the default file name keeps the name
  // the user gave.
  const std::string figure = o.figure == "access" ? "location" : o.figure;
  // Cheap checks first, so a typo in -o does not wait for the profile to load.
  {
    std::error_code ec;
    PSTAR_CHECK(!fs::equivalent(o.output_path, o.profile_path, ec), ConfigError, "-o ",
                o.output_path, ": that is the profile itself; give another output file");
  }
  const char* device = output_device(o.output_path);
  if (!o.tier.empty() && (figure == "location" || figure == "moves"))
    log::warn("--tier ", o.tier, " has no effect on --fig ", o.figure);
  const Profile profile = formats::read_profile(o.profile_path);
  if (!profile.checksummed) {
    log::warn("profile '", o.profile_path,
              "' has no checksum header (an older pstar wrote it, before profiles had one): read "
              "unchecked, so damage in it may go unnoticed (docs/profile.md#the-checksum-header)");
  }
  check_profile(o.profile_path, profile);
  PSTAR_CHECK(plplot_has_device(device), IoError, "PLplot has no '", device,
              "' output device; install plplot-driver-cairo (scripts/setup-deps.sh)");

  TempOutput out(o.output_path);
  PlotSession session(device, out.path());
  if (figure == "memory")
    memory_figure(profile, o.tier.empty() ? "device" : o.tier);
  else if (figure == "location")
    location_figure(profile);
  else if (figure == "moves")
    moves_figure(profile);
  else if (figure == "timeline")
    timeline_figure(profile, o.tier);
  else
    PSTAR_INTERNAL_ASSERT(false, "unknown figure '", o.figure, "' passed the CLI check");
  session.finish();
  out.commit();
  log::info("wrote ", o.output_path, " (", figure, ", ", profile.by_moment.size(), " moments, ",
            profile.chunks.size(), " chunks)");
  // The result, for scripts: the file written.
  std::printf("%s\n", o.output_path.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace pstar::cmd
