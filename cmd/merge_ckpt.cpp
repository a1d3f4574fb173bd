// `pstar merge-ckpt`: joins a checkpoint's per-rank files into one file of the model's parameters,
// or reshards them for another number of ranks (docs/cli.md).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/log.h"
#include "pstar/train/checkpoint.h"
#include "pstar/train/merge.h"

namespace pstar::cmd {
namespace {

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

}  // namespace

void register_merge_ckpt(CLI::App& app) {
  auto o = std::make_shared<MergeCkptCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "merge-ckpt",
      "Join a checkpoint's per-rank files into one .safetensors or .pt file of the model's "
      "parameters, or reshard them for another number of ranks (see docs/cli.md)");
  auto* pattern = sub->add_option("--pattern", o->pattern,
                                  "The checkpoint's files, as a quoted shell pattern, e.g. "
                                  "'ck/step-00000100/ckpt-*.pt'");
  auto* dir = sub->add_option("--dir", o->dir,
                              "A checkpoint step directory: its ckpt-<rank>.pt files (instead "
                              "of --pattern)");
  pattern->excludes(dir);
  sub->add_option("--num", o->num,
                  "How many files (ranks) the checkpoint has; checked against the files and the "
                  "manifest (default with --dir: the manifest's world_size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("-o,--output", o->output,
                  "Output: NAME.safetensors or NAME.pt (a config.json that trains from it goes "
                  "beside it); with --reshard, a new checkpoint directory")
      ->required();
  sub->add_option("--dtype", o->dtype, "Parameter dtype of the output file")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  sub->add_option("--reshard", o->reshard,
                  "Write a checkpoint for this many ranks instead (pstar train --resume OUTPUT "
                  "--nproc M)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--config", o->config_path,
                  "With --reshard: the training config the resumed run uses, whose chunk layout "
                  "the files follow (default: the checkpoint's config.json)");
  sub->add_flag("-q,--quiet", o->quiet, "Only warnings and errors");
  sub->callback([o] { run_merge_ckpt(*o); });
}

int run_merge_ckpt(const MergeCkptCommandOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  if (o.quiet) log::set_level(log::Level::kWarn);
  PSTAR_CHECK(!o.pattern.empty() || !o.dir.empty(), ConfigError,
              "give the checkpoint's files: --pattern 'DIR/ckpt-*.pt' or --dir DIR");
  PSTAR_CHECK(o.reshard > 0 || o.config_path.empty(), ConfigError,
              "--config is for --reshard only");
  train::MergeOptions options;
  options.output = o.output;
  options.dtype = o.dtype == "bf16"   ? train::MergeDType::kBf16
                  : o.dtype == "fp16" ? train::MergeDType::kFp16
                                      : train::MergeDType::kFp32;
  options.reshard = o.reshard;
  options.config_path = o.config_path;
  train::check_merge_options(options);

  int64_t num = o.num;
  std::vector<std::string> files;
  if (!o.dir.empty()) {
    files = train::checkpoint_files_in(o.dir);
    if (num == 0) {
      PSTAR_CHECK(std::filesystem::exists(std::filesystem::path(o.dir) / "manifest.json"),
                  ConfigError, "--dir ", o.dir,
                  " has no manifest.json to tell how many ranks wrote it; give --num");
      num = train::read_manifest(o.dir).world_size;
    }
  } else {
    PSTAR_CHECK(num > 0, ConfigError, "--num: give the number of ranks (files) with --pattern");
    files = train::match_checkpoint_files(o.pattern);
  }

  log::info("merge-ckpt: checking ", files.size(), " file(s) for ", num, " rank(s)");
  const train::CheckpointIndex index = train::index_checkpoint(files, num);
  log::info("merge-ckpt: step ", index.step, index.run_id.empty() ? "" : ", run " + index.run_id,
            ", ", index.params.size(), " parameter tensors (", format_bytes(index.param_bytes),
            " fp32), largest file ", format_bytes(index.largest_file_tensor_bytes));
  const train::MergeSummary summary = train::merge_checkpoint(index, options);

  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  log::info("merge-ckpt: wrote ", summary.tensors, " tensors (", format_bytes(summary.bytes),
            ") to ", o.output, o.reshard > 0 ? str_cat(" (", o.reshard, " ranks)") : std::string(),
            " in ", seconds_text(seconds), "; held at most ", format_bytes(summary.peak_held_bytes),
            " of tensors at once");
  return 0;
}

}  // namespace pstar::cmd
