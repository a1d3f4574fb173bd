// The `pstar train` configuration: a JSON file with DeepSpeed/PatrickStar names where they exist
// (docs/config.md lists every key and its default). Parsing validates everything up front:
// an unknown key names its JSON path and the closest known key; a wrong type or range names the
// path, what was expected and what was found.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstar::config {

// A setting that is true, false or "auto" (JSON true, false or the string "auto"). A config keeps
// what the user asked for; the run plan (plan::resolve_run, Note [run plan]) decides every "auto"
// once from the facts of the run, and everything after reads the plan's decision.
enum class OnOffAuto : uint8_t { kAuto, kOff, kOn };
// The config's spelling, for messages and logs: "true", "false" or "\"auto\"" (quoted, as in JSON).
const char* on_off_auto_name(OnOffAuto value);
// kOn or kOff: a decided setting.
inline OnOffAuto on_off(bool on) { return on ? OnOffAuto::kOn : OnOffAuto::kOff; }

struct OptimizerConfig {
  std::string type = "AdamW";  // "Adam" (L2 weight decay) or "AdamW" (decoupled)
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// fp16 mixed precision with PatrickStar's dynamic loss-scaler defaults.
struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0 = dynamic; > 0 = that static scale
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
};

// bf16 mixed precision. `bf16.enabled` is true, false or "auto": bf16 only where the compute
// device runs bf16 matmuls fast and accurately, decided once at start-up by the run plan from the
// probe's verdict (plan::resolve_run; train/precision.h, Note [bf16 on CPUs]).
struct Bf16Config {
  OnOffAuto enabled = OnOffAuto::kOff;
};

struct ModelConfig {
  // "gpt", "decoder" (Llama, Mistral, Qwen2, Qwen3, Gemma 3, Phi-3/Phi-4; "llama" is its former
  // name), or empty: the preset's network, else the Hugging Face folder's in init_from, else gpt
  // (model::resolve_model_shape decides).
  std::string type;
  std::string preset;  // empty: explicit shape only
  // Explicit values override the preset's.
  std::optional<int64_t> hidden;
  std::optional<int64_t> layers;
  std::optional<int64_t> heads;
  std::optional<int64_t> vocab_size;
  std::optional<int64_t> seq_len;
  // A Hugging Face model folder (config.json + safetensors) or a GPT-2 .safetensors file,
  // resolved to an absolute path.
  std::string init_from;
};

// A held-out source for evaluation (data.eval): a token file, a text file or a JSON Lines file of
// records, read like the training source's keys; `text` goes through data.tokenizer when that is
// set, `jsonl` like data.jsonl (and only beside it).
struct EvalDataConfig {
  std::string path;              // flat binary token ids (resolved path), or empty
  std::string dtype = "uint16";  // "uint16" or "uint32", for `path`
  std::string text;              // UTF-8 text (resolved path), or empty
  std::string jsonl;             // JSON Lines records (resolved path), or empty
  bool set() const { return !path.empty() || !text.empty() || !jsonl.empty(); }
};

// Which tokens of a conversation count in the loss (data.loss_on, docs/data.md#records).
enum class LossOn : uint8_t { kAssistant, kLastAssistant, kAll };
const char* loss_on_name(LossOn value);  // the config's spelling: "assistant", ...

struct DataConfig {
  // The training source: exactly one of path, text and jsonl.
  std::string path;              // flat binary token ids (resolved path), or empty
  std::string dtype = "uint16";  // "uint16" or "uint32", for `path`
  std::string text;              // UTF-8 text (resolved path), or empty
  // JSON Lines records (resolved path), or empty: one {"messages": [...]}, {"prompt",
  // "completion"} or {"text"} object a line, tokenized through `tokenizer` into records whose
  // tokens say whether they count in the loss (docs/data.md#records).
  std::string jsonl;
  // For `text` (optional) and `jsonl` (required): a Hugging Face tokenizer.json, a folder holding
  // one, or a folder with GPT-2's vocab.json and merges.txt (resolved path); empty: the text's
  // bytes are its tokens.
  std::string tokenizer;
  // For `jsonl`'s conversations: the tokenizer_config.json whose chat_template renders them
  // (resolved path); empty: the one beside `tokenizer`.
  std::string chat_template;
  std::string chat_date;  // "" or YYYY-MM-DD: what the template's strftime_now() gives
  // Further template variables, as apply_chat_template's keyword arguments ({"enable_thinking":
  // false} for Qwen3): the text of a JSON object, or "" for none.
  std::string chat_template_kwargs;
  LossOn loss_on = LossOn::kAssistant;
  bool packing = true;  // several records to a seq_len window (else one, padded)
  // A record longer than seq_len + 1 tokens: cut (and counted in the log), or an error.
  bool truncate = true;
  bool skip_bad_records = false;    // a malformed record: skipped and counted, or an error
  std::string sampling = "random";  // "random" or "sequential"
  // Held-out data (docs/data.md#held-out-data): a second source, or the last `eval_fraction`
  // (0 < f < 1) of the training source (of its tokens, or of its records for `jsonl`), which
  // training then never samples. At most one.
  EvalDataConfig eval;
  std::optional<double> eval_fraction;
  bool has_eval() const { return eval.set() || eval_fraction.has_value(); }
};

struct LrScheduleConfig {
  std::string type = "cosine";  // "cosine" or "constant" (both after a linear warm-up)
  int64_t warmup_steps = 0;
  double min_lr = 0.0;  // the floor cosine decays to
};

struct TrainingConfig {
  int64_t steps = 100;
  uint64_t seed = 1234;
  int64_t log_interval = 10;
  LrScheduleConfig lr_schedule;
  // Checkpoints: every save_interval steps and after the last step, into save_dir (relative to the
  // working directory). save_interval 0 or an empty save_dir: no checkpoints.
  std::string save_dir;
  int64_t save_interval = 0;
  // How many complete checkpoints to keep; older ones are deleted once a newer one is complete
  // and `latest` names it. 0 keeps every checkpoint.
  int64_t keep_last = 3;
  // The held-out loss (docs/training.md#held-out-loss): every eval_interval steps (0: only after
  // the last step) over eval_batches micro-batches of held-out windows, split over the ranks.
  int64_t eval_interval = 0;
  int64_t eval_batches = 8;
  // Prompts whose greedy completions go into the metrics file at each evaluation (every
  // eval_interval steps and after the last; docs/training.md#samples), each as a JSON object's
  // text in data.jsonl's shapes: {"prompt": ...} (a string in the file reads as that) or
  // {"messages": [...]} (through the chat template, with its generation prompt).
  std::vector<std::string> eval_samples;
  int64_t eval_sample_tokens = 32;  // new tokens a sample, at most
  // Where rank 0 writes a TensorBoard event file of the run (docs/training.md#tensorboard),
  // relative to the working directory like save_dir; empty: none.
  std::string tensorboard_dir;
};

// engine.mode: "chunked", model data in chunks moved between a device tier and the host
// (docs/engine.md); "torch", plain LibTorch training, the reference.
enum class EngineMode : uint8_t { kChunked, kTorch };
const char* engine_mode_name(EngineMode mode);  // the config's spelling
// The mode a config spells `name`; ConfigError naming the valid ones otherwise.
EngineMode engine_mode_from_name(const std::string& name);

struct EngineConfig {
  EngineMode mode = EngineMode::kChunked;
  // Tier budgets in bytes; unset: what the machine has, times 0.8.
  std::optional<int64_t> device_memory;
  std::optional<int64_t> host_memory;
  bool activation_checkpointing = false;  // recompute each block's activations in backward
  int64_t warmup_iterations = 1;          // iterations traced before OPT placement starts
  bool chunk_size_search = false;         // pick the chunk size that wastes least (logged)
  bool prefetch = true;  // upload the next module's chunks while the current one computes
  // Host Adam on a worker thread while the next step's forward starts (docs/engine.md): true,
  // false, or "auto" (on when the device tier is a GPU: plan::overlap_adam_on).
  OnOffAuto overlap_adam = OnOffAuto::kAuto;
  // With gradient_clipping or fp16, start host Adam in the backward with the multiplier of a step
  // that does not clip, and redo it exactly when the step did (Note [speculative adam]): true
  // (every step), false, or "auto" (with overlap_adam, on steps after ones that did not clip).
  OnOffAuto speculative_adam = OnOffAuto::kAuto;
  // The NVMe tier (docs/engine.md, "A third tier"): a directory on a fast local disk where the
  // optimizer payloads of chunks that fit neither host nor device memory live. Empty: no NVMe tier.
  // Relative paths are relative to the working directory, like training.save_dir.
  std::string nvme_path;
};

// distributed.backend: the collectives between the ranks of a multi-rank run (docs/distributed.md).
// "auto" follows each rank's compute device (nccl on a GPU, gloo on the CPU); the run plan decides
// it with the device (plan::choose_rank_device, Note [rank device]).
enum class DistBackend : uint8_t { kAuto, kNccl, kGloo };
const char* dist_backend_name(DistBackend backend);  // the config's spelling: "auto", ...
// The backend a config spells `name`; ConfigError naming the valid ones otherwise.
DistBackend dist_backend_from_name(const std::string& name);

struct DistributedConfig {
  DistBackend backend = DistBackend::kAuto;
  // Lets more of a node's ranks than it has visible GPUs share them (local rank r on GPU r mod
  // count, over Gloo: NCCL refuses two ranks on one GPU), so that several ranks can be tested on a
  // machine with one GPU. Off, that many ranks is a ConfigError giving both counts.
  bool share_gpus = false;
  // Binds each rank to a NUMA node where the machine has several: its GPU's, or spread for CPU
  // ranks (Note [numa binding] in pstar/core/numa.h).
  bool numa_bind = true;
};

struct TrainConfig {
  std::string source;  // where it came from (file path), for messages

  int64_t train_micro_batch_size_per_gpu = 4;
  int64_t gradient_accumulation_steps = 1;
  std::optional<int64_t> train_batch_size;  // if set, must equal micro × accumulation × world
  OptimizerConfig optimizer;
  Fp16Config fp16;
  Bf16Config bf16;
  double gradient_clipping = 0.0;  // global-norm clip; 0 = off
  // Chunk-engine keys (PatrickStar names). Accepted and validated in every mode; only the
  // chunked engine uses them.
  int64_t default_chunk_size = 64LL * 1024 * 1024;
  // Keep the token embedding's chunk on the host (PatrickStar's use_cpu_embedding): true, false,
  // or "auto" (off on a GPU, on with the emulated tier: plan::cpu_embedding_on).
  OnOffAuto use_cpu_embedding = OnOffAuto::kAuto;
  bool release_after_init = false;

  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  EngineConfig engine;
  DistributedConfig distributed;
};

// Reads and validates a config file. `overrides` are `--set KEY=VALUE` strings applied before
// validation: KEY is a dotted path, VALUE is parsed as JSON, or taken as a string if it is not
// JSON. Relative paths in the file (model.init_from, data.path, data.text) resolve against the
// file's directory; relative paths given in overrides resolve against the working directory.
// Throws ConfigError (bad content) or IoError (unreadable file).
TrainConfig load_train_config(const std::string& path,
                              const std::vector<std::string>& overrides = {});

// The same from JSON text; `source` names it in messages and `base_dir` resolves relative paths.
TrainConfig parse_train_config(const std::string& json_text, const std::string& source,
                               const std::string& base_dir,
                               const std::vector<std::string>& overrides = {});

// The config as JSON text, every key present (defaults filled in). Written next to metrics and
// checkpoints so a run can be reproduced.
std::string to_json_text(const TrainConfig& config);

}  // namespace pstar::config
