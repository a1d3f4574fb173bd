// `pstar merge-ckpt`: joins a checkpoint's per-rank files into one file of the model's parameters,
// or reshards them for another number of ranks (docs/cli.md).
#include <algorithm>
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
#include "pstar/checkpoint/merge.h"
#include "pstar/checkpoint/store.h"
#include "pstar/core/log.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;

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
                  "beside it), or a name without extension: a Hugging Face model folder "
                  "(config.json + safetensors shards); with --reshard, a new checkpoint "
                  "directory (required). Default: "
                  "beside the files, the pattern's name with * replaced by 'merged' "
                  "(ckpt-*.pt -> ckpt-merged.pt), or DIR/ckpt-merged.pt with --dir");
  sub->add_option("--dtype", o->dtype, "Parameter dtype of the output file")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  sub->add_option("--max-shard-size", o->max_shard_size,
                  "With a Hugging Face folder as -o: the most tensor bytes per shard (KB, MB, GB, "
                  "KiB, ...; as Hugging Face's save_pretrained)")
      ->capture_default_str();
  sub->add_option("--reshard", o->reshard,
                  "Write a checkpoint for this many ranks instead (pstar train --resume OUTPUT "
                  "--nproc M)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--config", o->config_path,
                  "With --reshard: the training config the resumed run uses, whose chunk layout "
                  "the files follow (default: the checkpoint's config.json)");
  sub->add_flag("--force", o->force, "Replace the default output (without -o) if it exists");
  sub->add_flag("--unverified", o->unverified,
                "Also merge files that no manifest.json vouches for (no manifest, or one from "
                "before checksums), without checking their size and CRC-32");
  sub->add_flag("-q,--quiet", o->quiet, "Only warnings and errors");
  sub->callback([o] { run_merge_ckpt(*o); });
}

std::string merge_ckpt_default_output(const MergeCkptCommandOptions& o) {
  if (o.pattern.empty()) return (fs::path(o.dir) / "ckpt-merged.pt").string();
  const fs::path pattern(o.pattern);
  const std::string dir = pattern.parent_path().string();
  const std::string name = pattern.filename().string();
  const auto stars = std::count(name.begin(), name.end(), '*');
  const auto wildcard = [](const std::string& s) { return s.find_first_of("*?[") != s.npos; };
  PSTAR_CHECK(!wildcard(dir), ConfigError, "--pattern '", o.pattern,
              "': the files may lie in several directories, so there is no one place beside "
              "them; give the output with -o");
  PSTAR_CHECK(stars == 1 && name.find_first_of("?[") == std::string::npos, ConfigError,
              "--pattern '", o.pattern,
              "': an output name is derived from a pattern with one '*' in its file name (e.g. "
              "'ckpt-*.pt' -> ckpt-merged.pt); give the output with -o");
  std::string out_name = name;
  out_name.replace(out_name.find('*'), 1, "merged");
  const std::string ext = fs::path(out_name).extension().string();
  PSTAR_CHECK(ext == ".pt" || ext == ".safetensors", ConfigError, "--pattern '", o.pattern,
              "': the derived output ", out_name,
              " is neither .pt nor .safetensors; give the output with -o");
  return (pattern.parent_path() / out_name).string();
}

int run_merge_ckpt(const MergeCkptCommandOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  if (o.quiet) log::set_level(log::Level::kWarn);
  PSTAR_CHECK(!o.pattern.empty() || !o.dir.empty(), ConfigError,
              "give the checkpoint's files: --pattern 'DIR/ckpt-*.pt' or --dir DIR");
  PSTAR_CHECK(o.reshard > 0 || o.config_path.empty(), ConfigError,
              "--config is for --reshard only");
  PSTAR_CHECK(o.reshard == 0 || !o.output.empty(), ConfigError,
              "--reshard: give the new checkpoint directory with -o");
  checkpoint::MergeOptions options;
  // Without -o: beside the files, never over an existing file unless --force (an -o the user
  // named is theirs to replace, as before).
  const bool derived = o.output.empty();
  options.output = derived ? merge_ckpt_default_output(o) : o.output;
  if (derived) {
    std::error_code ec;
    PSTAR_CHECK(o.force || !fs::exists(options.output, ec), ConfigError, options.output,
                " already exists; give --force to replace it, or -o to write elsewhere");
  }
  options.beside_checkpoint = derived;
  options.dtype = o.dtype == "bf16"   ? checkpoint::MergeDType::kBf16
                  : o.dtype == "fp16" ? checkpoint::MergeDType::kFp16
                                      : checkpoint::MergeDType::kFp32;
  options.reshard = o.reshard;
  options.config_path = o.config_path;
  const std::optional<int64_t> shard_bytes = parse_size_bytes(o.max_shard_size);
  PSTAR_CHECK(shard_bytes.has_value(), ConfigError, "--max-shard-size ", o.max_shard_size,
              ": expected a size such as 5GB, 500MB or 2GiB");
  options.max_shard_bytes = static_cast<uint64_t>(*shard_bytes);
  checkpoint::check_merge_options(options);

  int64_t num = o.num;
  std::vector<std::string> files;
  if (!o.dir.empty()) {
    files = checkpoint::checkpoint_files_in(o.dir);
    if (num == 0) {
      PSTAR_CHECK(fs::exists(fs::path(o.dir) / "manifest.json"), ConfigError, "--dir ", o.dir,
                  " has no manifest.json to tell how many ranks wrote it; give --num");
      num = checkpoint::read_manifest(o.dir).world_size;
    }
  } else {
    PSTAR_CHECK(num > 0, ConfigError, "--num: give the number of ranks (files) with --pattern");
    files = checkpoint::match_checkpoint_files(o.pattern);
    // An earlier merge's output matches the pattern it was named after (ckpt-*.pt matches
    // ckpt-merged.pt): it is not a shard.
    if (derived) {
      files.erase(std::remove_if(files.begin(), files.end(),
                                 [&](const std::string& f) {
                                   std::error_code ec;
                                   return fs::equivalent(f, options.output, ec);
                                 }),
                  files.end());
    }
  }

  log::info("merge-ckpt: checking ", files.size(), " file(s) for ", num, " rank(s)");
  checkpoint::IndexOptions index_options;
  index_options.allow_unverified = o.unverified;
  const checkpoint::CheckpointIndex index = checkpoint::index_checkpoint(files, num, index_options);
  log::info("merge-ckpt: step ", index.step, index.run_id.empty() ? "" : ", run " + index.run_id,
            ", ", index.params.size(), " parameter tensors (", format_bytes(index.param_bytes),
            " fp32), largest file ", format_bytes(index.largest_file_tensor_bytes));
  const checkpoint::MergeSummary summary = checkpoint::merge_checkpoint(index, options);

  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  log::info("merge-ckpt: wrote ", summary.tensors, " tensors (", format_bytes(summary.bytes),
            ") to ", options.output,
            o.reshard > 0 ? str_cat(" (", o.reshard, " ranks)") : std::string(), " in ",
            seconds_text(seconds), "; held at most ", format_bytes(summary.peak_held_bytes),
            " of tensors at once");
  // The result, for scripts: the file (or with --reshard the directory) written.
  std::printf("%s\n", options.output.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace pstar::cmd
