// The pstar subcommands. Each lives in its own file with an options struct, a register function
// that adds it to the CLI, and a run function that calls the engine (tests may call run directly).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}
namespace pstar::config {
struct TrainConfig;
}

namespace pstar::cmd {

struct TrainCommandOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  std::string metrics_path;
  std::string device = "auto";
  std::string resume_dir;
  bool quiet = false;
  int64_t nproc = 0;  // > 0: start this many local ranks (launch_local)
  std::string master_port;
  int64_t dist_timeout_s = 300;
  std::string profile_path;  // --profile: record a profile (docs/profile.md)
  int64_t profile_from = 1;
  std::string step_bound = "auto";  // --step-bound: on, off, auto (the chunk engine on a GPU)
  std::string tensorboard_dir;      // --tensorboard: training.tensorboard_dir
};

// `--tensorboard DIR` of train and eval: `overrides` (--set) with training.tensorboard_dir=DIR
// last, so that it wins over a --set of the same key; unchanged when `dir` is empty
// (cmd/train.cpp).
std::vector<std::string> with_tensorboard_dir(std::vector<std::string> overrides,
                                              const std::string& dir);

void register_train(CLI::App& app);
int run_train(const TrainCommandOptions& options);
// The same in this process (options.nproc is ignored) on a config loaded already from
// options.config_path and options.overrides.
int run_train_config(const config::TrainConfig& config, const TrainCommandOptions& options);

// `pstar train --nproc N` (cmd/launch.cpp): runs this binary `nproc` times with `child_args` (the
// argv after the program name, --nproc removed) and each rank's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT and PSTAR_LAUNCHER=1. The port is
// `master_port` if given, else $MASTER_PORT, else a free loopback port. Returns 0 when every rank
// succeeds, else the first failing rank's exit code (128 + signal when a signal ended it).
int launch_local(int64_t nproc, const std::vector<std::string>& child_args,
                 const std::string& master_port);

struct EstimateCommandOptions {
  // Hardware.
  std::string hardware, gpu_mem, cpu_mem;
  int64_t gpus_per_node = 1, nodes = 1;
  std::optional<double> gpu_tflops, pcie_gbps, cpu_mem_gbps, link_gbps, net_gbps;
  double mfu = 0.5;
  // The NVMe tier per node: a size ("2TB"; empty: none) and its sequential rates ("6GB/s").
  std::string nvme, nvme_bw, nvme_write_bw;
  // Workload. seq_len: 1024 for searches, the preset's for --model. vocab: 50257 (GPT) or
  // 128256 (--family llama) for searches; a --model has its own.
  std::optional<int64_t> seq_len, vocab;
  int64_t micro_batch = 4;
  std::string checkpointing = "on", precision = "bf16", chunk_size = "64M";
  std::optional<int64_t> hidden, heads, layers;
  // A named model (any GPT or Llama-family preset) to check instead of a search, or the family
  // the search builds shapes of: "gpt" or "llama" (Llama-3-like, docs/estimate.md).
  std::string model, family = "gpt";
  // A config to check instead of a search.
  std::string config_path;
  std::vector<std::string> overrides;
  bool json = false, compare = false;
};

// `pstar profile CONFIG -o FILE.h5 [--steps N]`: trains the warm-up plus N steps and records the
// N (cmd/profile.cpp).
struct ProfileCommandOptions {
  std::string config_path, output;
  std::vector<std::string> overrides;
  int64_t steps = 3;
  std::string metrics_path;
  std::string device = "auto";
  int64_t nproc = 0;
  bool quiet = false;
};

void register_profile(CLI::App& app);
int run_profile(const ProfileCommandOptions& options);

void register_estimate(CLI::App& app);
int run_estimate(const EstimateCommandOptions& options);

// `pstar visualize PROFILE.h5 --fig FIGURE [-o OUT.png|svg|pdf]` (cmd/visualize.cpp,
// docs/cli.md). Prints the path it wrote on stdout.
struct VisualizeCommandOptions {
  std::string profile_path;
  std::string figure;       // memory | location (or access, PatrickStar's name) | moves | timeline
  std::string tier;         // device | host; empty: the figure's default
  std::string output_path;  // empty: visualize_default_output
};

// `<profile's directory>/<profile's stem>-<figure>.png`: run.h5 --fig memory -> run-memory.png.
std::string visualize_default_output(const VisualizeCommandOptions& options);

void register_visualize(CLI::App& app);
int run_visualize(const VisualizeCommandOptions& options);

// `pstar merge-ckpt --pattern 'DIR/ckpt-*.pt' --num N [-o OUT.safetensors|OUT.pt]` (or --dir DIR;
// --reshard M -o DIR writes a checkpoint for M ranks) (cmd/merge_ckpt.cpp, docs/cli.md). Prints
// the path it wrote on stdout.
struct MergeCkptCommandOptions {
  std::string pattern, dir;
  int64_t num = 0;                     // 0: with --dir, the manifest's world_size
  std::string output;                  // empty: beside the files (merge_ckpt_default_output)
  std::string dtype = "fp32";          // fp32 | bf16 | fp16
  std::string max_shard_size = "5GB";  // a Hugging Face folder's shard limit
  int64_t reshard = 0;                 // > 0: write a checkpoint for this many ranks
  std::string config_path;             // with reshard: the config whose chunk layout to follow
  bool force = false;                  // replace the default output if it exists
  bool unverified = false;             // also merge files no manifest vouches for
  bool quiet = false;
};

// Where merge-ckpt writes without -o: beside the files, under the pattern's file name with its
// one `*` replaced by `merged` (`ck/step-6/ckpt-*.pt` -> `ck/step-6/ckpt-merged.pt`), or
// `DIR/ckpt-merged.pt` for --dir DIR. ConfigError, asking for -o, when the pattern gives no
// such name (no or several `*`, other wildcards, wildcards in its directories, an extension
// other than .pt or .safetensors).
std::string merge_ckpt_default_output(const MergeCkptCommandOptions& options);

void register_merge_ckpt(CLI::App& app);
int run_merge_ckpt(const MergeCkptCommandOptions& options);

// `pstar eval CONFIG [--resume DIR]` (cmd/eval.cpp): the held-out loss of a checkpoint, printed
// as one JSON line ({"step", "eval_loss", "windows", "elapsed_s"}) on stdout.
struct EvalCommandOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  std::string resume_dir;              // empty: the model the config starts from
  std::string device = "auto";
  bool quiet = false;
  int64_t nproc = 0;  // > 0: start this many local ranks (launch_local)
  std::string master_port;
  int64_t dist_timeout_s = 300;
  std::string tensorboard_dir;  // --tensorboard: training.tensorboard_dir
};

void register_eval(CLI::App& app);
int run_eval(const EvalCommandOptions& options);

// `pstar generate MODEL --prompt TEXT ...` (cmd/generate.cpp, docs/cli.md): completions of a
// checkpoint or a Hugging Face folder, streamed to stdout for one prompt, or written to -o as JSON
// Lines.
struct GenerateCommandOptions {
  std::string model, tokenizer;
  std::vector<std::string> prompts;  // --prompt
  std::string prompts_file;          // --prompts FILE.jsonl
  bool chat = false;                 // --prompt as a user's message
  std::string chat_template_kwargs;
  int64_t max_new_tokens = 256, max_length = 0, top_k = 0, batch_size = 8;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  std::string device = "auto", dtype = "auto";
  bool skip_special = false, no_cache = false, quiet = false;
  std::string output;  // -o: JSON Lines
};

void register_generate(CLI::App& app);
int run_generate(const GenerateCommandOptions& options);

}  // namespace pstar::cmd
