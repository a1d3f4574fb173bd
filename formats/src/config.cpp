// Reading and validating the `pstar train` config: every key's read and the checks across keys.
// docs/config.md is the user-facing reference; keep it in step with read_config() here and
// to_json() in config/schema.cpp. The parts: config/messages (message pieces, typo suggestions),
// config/schema (serialization, Note [schema]), config/level (typed reads of one object),
// config/json_input (JSON text, --set).
#include "pstar/formats/config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/context.h"
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

// Held-out data (data.eval, data.eval_fraction) and when it is evaluated.
void check_eval(const Context& ctx, const TrainConfig& c) {
  const EvalDataConfig& eval = c.data.eval;
  if (eval.set() && c.data.eval_fraction) {
    ctx.fail_about({"data.eval", "data.eval_fraction"},
                   str_cat("data.eval and data.eval_fraction (", number_text(*c.data.eval_fraction),
                           ") are both set; hold out data one way: a second source in data.eval, "
                           "or the last fraction of the training source in data.eval_fraction"));
  }
  if (!eval.path.empty() && !eval.text.empty()) {
    ctx.fail_about({"data.eval.path", "data.eval.text"},
                   "data.eval.path and data.eval.text are both set; set exactly one of them "
                   "(data.eval.path for binary token ids, data.eval.text for a UTF-8 text file)");
  }
  if (!eval.text.empty() && c.data.text.empty()) {
    ctx.fail_about({"data.eval.text", "data.path"},
                   str_cat("data.eval.text (", eval.text,
                           ") needs training text in data.text, so that both are tokenized the "
                           "same way; with data.path give the held-out tokens in data.eval.path"));
  }
  if (c.training.eval_interval > 0 && !c.data.has_eval()) {
    ctx.fail_about({"training.eval_interval", "data.eval", "data.eval_fraction"},
                   str_cat("training.eval_interval is ", c.training.eval_interval,
                           " but there is no held-out data; set data.eval (a second source) or "
                           "data.eval_fraction (e.g. 0.05), or training.eval_interval 0"));
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
      "type", &c.model.type, {"gpt", "llama"},
      "\"llama\" covers Llama, Mistral and Qwen2; unset: from model.preset or model.init_from");
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
  data.read_string("tokenizer", &c.data.tokenizer);
  data.read_choice("sampling", &c.data.sampling, {"random", "sequential"});
  const Level eval = data.child("eval");
  eval.read_string("path", &c.data.eval.path);
  eval.read_choice("dtype", &c.data.eval.dtype, {"uint16", "uint32"});
  eval.read_string("text", &c.data.eval.text);
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
  engine.read_string("nvme_path", &c.engine.nvme_path);

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
  if (!c.data.path.empty() && !c.data.text.empty()) {
    ctx.fail_about({"data.path", "data.text"},
                   "data.path and data.text are both set; set exactly one of them (data.path for "
                   "binary token ids, data.text for a UTF-8 text file)");
  }
  if (!c.data.tokenizer.empty() && c.data.text.empty()) {
    ctx.fail_about({"data.tokenizer", "data.text"},
                   "data.tokenizer is set without data.text; the tokenizer turns data.text into "
                   "tokens at start-up (a data.path file already holds token ids)");
  }
  if (c.data.path.empty() && c.data.text.empty()) {
    ctx.fail_about({"data.path", "data.text"},
                   "no training data: set data.path (a flat binary file of token ids) or "
                   "data.text (a UTF-8 text file, tokenized as bytes)");
  }
  check_eval(ctx, c);
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
  c.data.tokenizer = resolve_path(ctx, "data.tokenizer", c.data.tokenizer, base_dir);
  c.data.eval.path = resolve_path(ctx, "data.eval.path", c.data.eval.path, base_dir);
  c.data.eval.text = resolve_path(ctx, "data.eval.text", c.data.eval.text, base_dir);
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
