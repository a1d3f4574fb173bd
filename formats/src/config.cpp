// Reading and validating the `pstar train` config: every key's read and the checks across keys.
// docs/config.md is the user-facing reference; keep it in step with read_config() here and
// to_json() in config/schema.cpp. The parts: config/messages (message pieces, typo suggestions),
// config/schema (serialization, Note [schema]), config/level (typed reads of one object),
// config/json_input (JSON text, --set), config/data_checks (the checks across data keys).
#include "pstar/formats/config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/context.h"
#include "config/data_checks.h"
#include "config/json_input.h"
#include "config/level.h"
#include "config/messages.h"
#include "pstar/base/error.h"
#include "pstar/base/strings.h"

namespace pstar::config {
namespace {

namespace fs = std::filesystem;
using detail::Context;
using detail::Json;
using detail::kInt64Max;
using detail::kIntMax;
using detail::kNonNegative;
using detail::kOpenUnit;
using detail::kPositive;
using detail::Level;
using detail::number_text;
using detail::NumberRange;
using detail::type_and_value;

// Relative paths in the file resolve against its directory; relative paths from --set against the
// working directory, where the user typed them. Existence is the engine's to check.
std::string resolve_path(const Context& ctx, const std::string& key, const std::string& value,
                         const std::string& base_dir) {
  if (value.empty()) return value;
  const fs::path path(value);
  if (path.is_absolute()) return path.lexically_normal().string();
  try {
    const bool from_cwd = ctx.set_by_override(key) || base_dir.empty();
    const fs::path base = from_cwd ? fs::current_path() : fs::path(base_dir);
    return fs::absolute(base / path).lexically_normal().string();
  } catch (const fs::filesystem_error& e) {
    PSTAR_THROW(IoError, ctx.source(), ": ", key, ": cannot make '", value,
                "' an absolute path: ", e.what());
  }
}

TrainConfig read_config(const Context& ctx, const Json& root, const std::string& base_dir) {
  TrainConfig c;
  const Level top(ctx, &root, "");
  top.read_int("train_micro_batch_size_per_gpu", &c.train_micro_batch_size_per_gpu, 1, kInt64Max);
  top.read_int("gradient_accumulation_steps", &c.gradient_accumulation_steps, 1, kInt64Max);
  top.read_optional_int("train_batch_size", &c.train_batch_size, 1, kInt64Max);

  const Level optimizer = top.child("optimizer");
  optimizer.read_choice("type", &c.optimizer.type, {"Adam", "AdamW"});
  const Level params = optimizer.child("params");
  params.read_number("lr", &c.optimizer.lr, kPositive);
  params.read_number_pair("betas", &c.optimizer.betas, NumberRange{0, true, 1, false});
  params.read_number("eps", &c.optimizer.eps, kPositive);
  params.read_number("weight_decay", &c.optimizer.weight_decay, kNonNegative);

  const Level fp16 = top.child("fp16");
  fp16.read_bool("enabled", &c.fp16.enabled);
  fp16.read_number("loss_scale", &c.fp16.loss_scale, kNonNegative);
  fp16.read_int("initial_scale_power", &c.fp16.initial_scale_power, 0, 64);
  fp16.read_int("loss_scale_window", &c.fp16.loss_scale_window, 1, kInt64Max);
  fp16.read_int("hysteresis", &c.fp16.hysteresis, 1, kIntMax);
  fp16.read_number("min_loss_scale", &c.fp16.min_loss_scale, kPositive);

  top.child("bf16").read_on_off_auto("enabled", &c.bf16.enabled);
  top.read_number("gradient_clipping", &c.gradient_clipping, kNonNegative);
  top.read_int("default_chunk_size", &c.default_chunk_size, 1, kInt64Max);
  top.read_on_off_auto("use_cpu_embedding", &c.use_cpu_embedding);
  top.read_bool("release_after_init", &c.release_after_init);

  const Level model = top.child("model");
  model.read_optional_choice(
      "type", &c.model.type, {"gpt", "decoder", "llama"},
      "\"decoder\" covers Llama, Mistral, Qwen2, Qwen3, Gemma 3 and Phi-3/Phi-4 (\"llama\" is its "
      "former name); unset: from model.preset or model.init_from");
  model.read_string("preset", &c.model.preset);  // the engine knows the presets and checks it
  model.read_optional_int("hidden", &c.model.hidden, 1, kInt64Max);
  model.read_optional_int("layers", &c.model.layers, 1, kInt64Max);
  model.read_optional_int("heads", &c.model.heads, 1, kInt64Max);
  model.read_optional_int("vocab_size", &c.model.vocab_size, 1, kInt64Max);
  model.read_optional_int("seq_len", &c.model.seq_len, 1, kInt64Max);
  model.read_string("init_from", &c.model.init_from);

  const Level data = top.child("data");
  data.read_string("path", &c.data.path);
  data.read_choice("dtype", &c.data.dtype, {"uint16", "uint32"});
  data.read_string("text", &c.data.text);
  data.read_string("jsonl", &c.data.jsonl);
  data.read_string("tokenizer", &c.data.tokenizer);
  data.read_string("chat_template", &c.data.chat_template);
  data.read_string("chat_date", &c.data.chat_date);
  data.read_json_object("chat_template_kwargs", &c.data.chat_template_kwargs);
  std::string loss_on = loss_on_name(c.data.loss_on);
  data.read_choice("loss_on", &loss_on, {"assistant", "last_assistant", "all"},
                   "the assistant turns, the last assistant turn, or every token");
  c.data.loss_on = loss_on == "all"              ? LossOn::kAll
                   : loss_on == "last_assistant" ? LossOn::kLastAssistant
                                                 : LossOn::kAssistant;
  data.read_bool("packing", &c.data.packing);
  data.read_bool("truncate", &c.data.truncate);
  data.read_bool("skip_bad_records", &c.data.skip_bad_records);
  data.read_choice("sampling", &c.data.sampling, {"random", "sequential"});
  const Level eval = data.child("eval");
  eval.read_string("path", &c.data.eval.path);
  eval.read_choice("dtype", &c.data.eval.dtype, {"uint16", "uint32"});
  eval.read_string("text", &c.data.eval.text);
  eval.read_string("jsonl", &c.data.eval.jsonl);
  data.read_optional_number("eval_fraction", &c.data.eval_fraction, kOpenUnit,
                            "the share of the training source held out, e.g. 0.05");

  const Level training = top.child("training");
  training.read_int("steps", &c.training.steps, 1, kInt64Max);
  training.read_uint64("seed", &c.training.seed);
  training.read_int("log_interval", &c.training.log_interval, 1, kInt64Max);
  training.read_string("save_dir", &c.training.save_dir);
  training.read_int("save_interval", &c.training.save_interval, 0, kInt64Max);
  training.read_int("keep_last", &c.training.keep_last, 0, kInt64Max);
  training.read_int("eval_interval", &c.training.eval_interval, 0, kInt64Max);
  training.read_int("eval_batches", &c.training.eval_batches, 1, kInt64Max);
  training.read_prompt_list("eval_samples", &c.training.eval_samples);
  training.read_int("eval_sample_tokens", &c.training.eval_sample_tokens, 1, 1 << 20);
  training.read_string("tensorboard_dir", &c.training.tensorboard_dir);
  const Level schedule = training.child("lr_schedule");
  schedule.read_choice("type", &c.training.lr_schedule.type, {"cosine", "constant"});
  schedule.read_int("warmup_steps", &c.training.lr_schedule.warmup_steps, 0, kInt64Max);
  schedule.read_number("min_lr", &c.training.lr_schedule.min_lr, kNonNegative);

  const Level engine = top.child("engine");
  std::string mode = engine_mode_name(c.engine.mode);
  engine.read_choice("mode", &mode, {"chunked", "torch"});
  c.engine.mode = engine_mode_from_name(mode);
  engine.read_optional_size("device_memory", &c.engine.device_memory);
  engine.read_optional_size("host_memory", &c.engine.host_memory);
  engine.read_bool("activation_checkpointing", &c.engine.activation_checkpointing);
  engine.read_int("warmup_iterations", &c.engine.warmup_iterations, 1, 1000);
  engine.read_bool("chunk_size_search", &c.engine.chunk_size_search);
  engine.read_bool("prefetch", &c.engine.prefetch);
  engine.read_on_off_auto("overlap_adam", &c.engine.overlap_adam);
  engine.read_on_off_auto("speculative_adam", &c.engine.speculative_adam);
  engine.read_string("nvme_path", &c.engine.nvme_path);

  const Level distributed = top.child("distributed");
  std::string backend = dist_backend_name(c.distributed.backend);
  distributed.read_choice("backend", &backend, {"auto", "nccl", "gloo"},
                          "\"auto\" follows the compute device: nccl on a GPU, gloo on the CPU");
  c.distributed.backend = dist_backend_from_name(backend);
  distributed.read_bool("share_gpus", &c.distributed.share_gpus);
  distributed.read_bool("numa_bind", &c.distributed.numa_bind);

  // Checks across keys. train_batch_size is micro × accumulation × the world size, which a config
  // does not know: the run plan checks it (plan::resolve_run).
  if (c.fp16.enabled && c.bf16.enabled != OnOffAuto::kOff) {
    ctx.fail_about({"fp16.enabled", "bf16.enabled"},
                   c.bf16.enabled == OnOffAuto::kAuto
                       ? "fp16.enabled is true and bf16.enabled is \"auto\"; enable at most one "
                         "of them (\"auto\" may choose bf16)"
                       : "fp16.enabled and bf16.enabled are both true; enable at most one of them");
  }
  if (c.model.hidden && c.model.heads && *c.model.hidden % *c.model.heads != 0) {
    ctx.fail_about(
        {"model.hidden", "model.heads"},
        str_cat("model.hidden: expected a multiple of model.heads (", *c.model.heads, "), found ",
                *c.model.hidden, "; each attention head takes hidden / heads channels"));
  }
  detail::check_data(ctx, c);
  if (c.training.lr_schedule.min_lr > c.optimizer.lr) {
    ctx.fail_about({"training.lr_schedule.min_lr", "optimizer.params.lr"},
                   str_cat("training.lr_schedule.min_lr: expected a number in [0, "
                           "optimizer.params.lr = ",
                           number_text(c.optimizer.lr), "], found ",
                           number_text(c.training.lr_schedule.min_lr),
                           "; the schedule decays from lr down to min_lr"));
  }

  c.model.init_from = resolve_path(ctx, "model.init_from", c.model.init_from, base_dir);
  c.data.path = resolve_path(ctx, "data.path", c.data.path, base_dir);
  c.data.text = resolve_path(ctx, "data.text", c.data.text, base_dir);
  c.data.jsonl = resolve_path(ctx, "data.jsonl", c.data.jsonl, base_dir);
  c.data.tokenizer = resolve_path(ctx, "data.tokenizer", c.data.tokenizer, base_dir);
  c.data.chat_template = resolve_path(ctx, "data.chat_template", c.data.chat_template, base_dir);
  c.data.eval.path = resolve_path(ctx, "data.eval.path", c.data.eval.path, base_dir);
  c.data.eval.text = resolve_path(ctx, "data.eval.text", c.data.eval.text, base_dir);
  c.data.eval.jsonl = resolve_path(ctx, "data.eval.jsonl", c.data.eval.jsonl, base_dir);
  return c;
}

}  // namespace

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    PSTAR_THROW(IoError, "cannot read config file '", path, "': it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    PSTAR_THROW(IoError, "cannot open config file '", path, "': ", std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) PSTAR_THROW(IoError, "cannot read config file '", path, "': read failed");
  std::string base_dir = fs::path(path).parent_path().string();
  if (base_dir.empty()) base_dir = ".";
  return parse_train_config(text.str(), path, base_dir, overrides);
}

TrainConfig parse_train_config(const std::string& json_text, const std::string& source,
                               const std::string& base_dir,
                               const std::vector<std::string>& overrides) {
  Context ctx(source);
  Json root = detail::parse_json(json_text, source);
  if (!root.is_object()) {
    PSTAR_THROW(ConfigError, source, ": expected a JSON object at the top level, found ",
                type_and_value(root));
  }
  for (const std::string& text : overrides) detail::apply_override(text, &root, &ctx);
  TrainConfig config = read_config(ctx, root, base_dir);
  config.source = source;
  return config;
}

}  // namespace pstar::config
