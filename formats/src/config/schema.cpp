// Serialization of the config and the schema the parser derives from it (config/schema.h).
#include "config/schema.h"

#include <utility>

#include "pstar/base/error.h"

namespace pstar::config {
namespace detail {
namespace {

Json optional_json(const std::optional<int64_t>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json on_off_auto_json(OnOffAuto value) {
  return value == OnOffAuto::kAuto ? Json("auto") : Json(value == OnOffAuto::kOn);
}

}  // namespace

// Sub-objects are built whole and then moved in: ordered_json stores members in a vector, so a
// reference into one object does not survive inserting a sibling.
Json to_json(const TrainConfig& c) {
  Json params = Json::object();
  params["lr"] = c.optimizer.lr;
  params["betas"] = Json::array({c.optimizer.betas[0], c.optimizer.betas[1]});
  params["eps"] = c.optimizer.eps;
  params["weight_decay"] = c.optimizer.weight_decay;
  Json optimizer = Json::object();
  optimizer["type"] = c.optimizer.type;
  optimizer["params"] = std::move(params);

  Json fp16 = Json::object();
  fp16["enabled"] = c.fp16.enabled;
  fp16["loss_scale"] = c.fp16.loss_scale;
  fp16["initial_scale_power"] = c.fp16.initial_scale_power;
  fp16["loss_scale_window"] = c.fp16.loss_scale_window;
  fp16["hysteresis"] = c.fp16.hysteresis;
  fp16["min_loss_scale"] = c.fp16.min_loss_scale;

  Json bf16 = Json::object();
  bf16["enabled"] = on_off_auto_json(c.bf16.enabled);

  Json model = Json::object();
  model["type"] = c.model.type.empty() ? Json(nullptr) : Json(c.model.type);
  model["preset"] = c.model.preset;
  model["hidden"] = optional_json(c.model.hidden);
  model["layers"] = optional_json(c.model.layers);
  model["heads"] = optional_json(c.model.heads);
  model["vocab_size"] = optional_json(c.model.vocab_size);
  model["seq_len"] = optional_json(c.model.seq_len);
  model["init_from"] = c.model.init_from;

  Json data = Json::object();
  data["path"] = c.data.path;
  data["dtype"] = c.data.dtype;
  data["text"] = c.data.text;
  data["jsonl"] = c.data.jsonl;
  data["tokenizer"] = c.data.tokenizer;
  data["chat_template"] = c.data.chat_template;
  data["chat_date"] = c.data.chat_date;
  data["chat_template_kwargs"] = c.data.chat_template_kwargs.empty()
                                     ? Json::object()
                                     : Json::parse(c.data.chat_template_kwargs);
  data["loss_on"] = loss_on_name(c.data.loss_on);
  data["packing"] = c.data.packing;
  data["truncate"] = c.data.truncate;
  data["skip_bad_records"] = c.data.skip_bad_records;
  data["sampling"] = c.data.sampling;
  Json eval = Json::object();
  eval["path"] = c.data.eval.path;
  eval["dtype"] = c.data.eval.dtype;
  eval["text"] = c.data.eval.text;
  eval["jsonl"] = c.data.eval.jsonl;
  data["eval"] = std::move(eval);
  data["eval_fraction"] = c.data.eval_fraction ? Json(*c.data.eval_fraction) : Json(nullptr);

  Json schedule = Json::object();
  schedule["type"] = c.training.lr_schedule.type;
  schedule["warmup_steps"] = c.training.lr_schedule.warmup_steps;
  schedule["min_lr"] = c.training.lr_schedule.min_lr;
  Json training = Json::object();
  training["steps"] = c.training.steps;
  training["seed"] = c.training.seed;
  training["log_interval"] = c.training.log_interval;
  training["lr_schedule"] = std::move(schedule);
  training["save_dir"] = c.training.save_dir;
  training["save_interval"] = c.training.save_interval;
  training["keep_last"] = c.training.keep_last;
  training["eval_interval"] = c.training.eval_interval;
  training["eval_batches"] = c.training.eval_batches;
  Json samples = Json::array();
  for (const auto& sample : c.training.eval_samples) samples.push_back(Json::parse(sample));
  training["eval_samples"] = std::move(samples);
  training["eval_sample_tokens"] = c.training.eval_sample_tokens;
  training["tensorboard_dir"] = c.training.tensorboard_dir;

  Json engine = Json::object();
  engine["mode"] = engine_mode_name(c.engine.mode);
  engine["device_memory"] = optional_json(c.engine.device_memory);
  engine["host_memory"] = optional_json(c.engine.host_memory);
  engine["activation_checkpointing"] = c.engine.activation_checkpointing;
  engine["warmup_iterations"] = c.engine.warmup_iterations;
  engine["chunk_size_search"] = c.engine.chunk_size_search;
  engine["prefetch"] = c.engine.prefetch;
  engine["overlap_adam"] = on_off_auto_json(c.engine.overlap_adam);
  engine["speculative_adam"] = on_off_auto_json(c.engine.speculative_adam);
  engine["nvme_path"] = c.engine.nvme_path;

  Json distributed = Json::object();
  distributed["backend"] = dist_backend_name(c.distributed.backend);
  distributed["share_gpus"] = c.distributed.share_gpus;
  distributed["numa_bind"] = c.distributed.numa_bind;

  Json j = Json::object();
  j["train_micro_batch_size_per_gpu"] = c.train_micro_batch_size_per_gpu;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  j["train_batch_size"] = optional_json(c.train_batch_size);
  j["optimizer"] = std::move(optimizer);
  j["fp16"] = std::move(fp16);
  j["bf16"] = std::move(bf16);
  j["gradient_clipping"] = c.gradient_clipping;
  j["default_chunk_size"] = c.default_chunk_size;
  j["use_cpu_embedding"] = on_off_auto_json(c.use_cpu_embedding);
  j["release_after_init"] = c.release_after_init;
  j["model"] = std::move(model);
  j["data"] = std::move(data);
  j["training"] = std::move(training);
  j["engine"] = std::move(engine);
  j["distributed"] = std::move(distributed);
  return j;
}

// Note [schema]
// The keys the parser accepts are exactly the tree that to_json() writes for a default
// TrainConfig: objects are levels, everything else (null for an unset optional) is a leaf. So the
// keys parse_train_config accepts and the keys to_json_text writes cannot drift apart; a new field
// needs one line in to_json() and one read in read_config(), and Level::find() asserts the latter
// only asks for keys the former wrote.
const Json& schema() {
  static const Json tree = to_json(TrainConfig{});
  return tree;
}

const Json& schema_at(const std::string& path) {
  const Json* node = &schema();
  size_t start = 0;
  while (!path.empty() && start <= path.size()) {
    const size_t dot = std::min(path.find('.', start), path.size());
    const std::string key = path.substr(start, dot - start);
    PSTAR_INTERNAL_ASSERT(node->is_object() && node->contains(key), "no schema entry for '", path,
                          "'");
    node = &(*node)[key];
    start = dot + 1;
  }
  return *node;
}

void collect_paths(const Json& node, const std::string& prefix, std::vector<std::string>* out) {
  for (const auto& item : node.items()) {
    const std::string path = join_path(prefix, item.key());
    out->push_back(path);
    if (item.value().is_object()) collect_paths(item.value(), path, out);
  }
}

}  // namespace detail

const char* on_off_auto_name(OnOffAuto value) {
  switch (value) {
    case OnOffAuto::kAuto:
      return "\"auto\"";
    case OnOffAuto::kOff:
      return "false";
    case OnOffAuto::kOn:
      return "true";
  }
  return "?";
}

const char* loss_on_name(LossOn value) {
  switch (value) {
    case LossOn::kAssistant:
      return "assistant";
    case LossOn::kLastAssistant:
      return "last_assistant";
    case LossOn::kAll:
      return "all";
  }
  return "?";
}

const char* engine_mode_name(EngineMode mode) {
  switch (mode) {
    case EngineMode::kChunked:
      return "chunked";
    case EngineMode::kTorch:
      return "torch";
  }
  return "?";
}

EngineMode engine_mode_from_name(const std::string& name) {
  if (name == "chunked") return EngineMode::kChunked;
  if (name == "torch") return EngineMode::kTorch;
  PSTAR_THROW(ConfigError, "engine.mode: expected one of \"chunked\", \"torch\", found \"", name,
              "\"");
}

const char* dist_backend_name(DistBackend backend) {
  switch (backend) {
    case DistBackend::kAuto:
      return "auto";
    case DistBackend::kNccl:
      return "nccl";
    case DistBackend::kGloo:
      return "gloo";
  }
  return "?";
}

DistBackend dist_backend_from_name(const std::string& name) {
  for (DistBackend b : {DistBackend::kAuto, DistBackend::kNccl, DistBackend::kGloo})
    if (name == dist_backend_name(b)) return b;
  PSTAR_THROW(ConfigError,
              "distributed.backend: expected one of \"auto\", \"nccl\", \"gloo\", found \"", name,
              "\"");
}

std::string to_json_text(const TrainConfig& config) {
  return detail::to_json(config).dump(2, ' ', false, detail::Json::error_handler_t::replace) + "\n";
}

}  // namespace pstar::config
