// Parsing and validation of the `pstar train` config. docs/config.md is the user-facing reference;
// keep it in step with read_config() and to_json() below.
#include "pstar/formats/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/base/strings.h"

namespace pstar::config {
namespace {

namespace fs = std::filesystem;
// ordered_json keeps the file's key order, so the first problem reported is the first one in the
// file, and to_json_text writes the keys in the documented order.
using Json = nlohmann::ordered_json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kMaxShownChars = 60;

// ---------------------------------------------------------------------------------------------
// Message pieces

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// `inner` is `outer` itself or lies inside it ("a.b" is inside "a", "ab" is not).
bool is_within(const std::string& inner, const std::string& outer) {
  return inner == outer || starts_with(inner, outer + ".");
}

// Keys that document a config file rather than configure anything.
bool is_comment_key(const std::string& key) {
  return starts_with(key, "_comment") || starts_with(key, "//");
}

std::string cut_to_shown_length(std::string text) {
  if (text.size() <= kMaxShownChars) return text;
  size_t cut = kMaxShownChars - 3;
  // Never split a UTF-8 sequence: back up over continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

// The JSON text of a value, cut to about 60 characters so that an object never floods a message.
std::string shown(const Json& value) {
  return cut_to_shown_length(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

// What a value is, for "found ..." in messages: `string "ten"`, `number 3.5`, `null`.
std::string type_and_value(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean " + shown(value);
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer " + shown(value);
    case Json::value_t::number_float:
      return "number " + shown(value);
    case Json::value_t::string:
      return "string " + shown(value);
    case Json::value_t::array:
      return "array " + shown(value);
    case Json::value_t::object:
      return "object " + shown(value);
    case Json::value_t::binary:
      return "binary data";
    case Json::value_t::discarded:
      return "nothing";
  }
  return "a value of unknown type";
}

// A number for a message: integral values without a fraction ("[0, 1)"), others as JSON writes
// them.
std::string number_text(double value) {
  if (std::isfinite(value) && std::floor(value) == value && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  return Json(value).dump();
}

std::string quoted_list(const std::vector<std::string>& items, const std::string& quote) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += quote + items[i] + quote;
  }
  return out;
}

// "'a'", "'a' or 'b'", "'a', 'b' or 'c'".
std::string alternatives(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out += "'" + items[i] + "'";
  }
  return out;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Levenshtein distance, ignoring ASCII case: "LR" is as close to "lr" as it gets.
size_t edit_distance(const std::string& a_in, const std::string& b_in) {
  const std::string a = lower(a_in);
  const std::string b = lower(b_in);
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate closest to `word`, if it is close enough to be a plausible typo: within
// max(2, len/3) edits. Ties go to the earlier candidate (the documented order).
std::optional<std::string> closest(const std::string& word,
                                   const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Serialization

Json optional_json(const std::optional<int64_t>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json on_off_auto_json(OnOffAuto value) {
  return value == OnOffAuto::kAuto ? Json("auto") : Json(value == OnOffAuto::kOn);
}

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
  data["tokenizer"] = c.data.tokenizer;
  data["sampling"] = c.data.sampling;
  Json eval = Json::object();
  eval["path"] = c.data.eval.path;
  eval["dtype"] = c.data.eval.dtype;
  eval["text"] = c.data.eval.text;
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

  Json engine = Json::object();
  engine["mode"] = engine_mode_name(c.engine.mode);
  engine["device_memory"] = optional_json(c.engine.device_memory);
  engine["host_memory"] = optional_json(c.engine.host_memory);
  engine["activation_checkpointing"] = c.engine.activation_checkpointing;
  engine["warmup_iterations"] = c.engine.warmup_iterations;
  engine["chunk_size_search"] = c.engine.chunk_size_search;
  engine["prefetch"] = c.engine.prefetch;
  engine["overlap_adam"] = on_off_auto_json(c.engine.overlap_adam);
  engine["nvme_path"] = c.engine.nvme_path;

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

// ---------------------------------------------------------------------------------------------
// Parsing

struct Override {
  std::string key;   // the dotted path it set
  std::string text;  // the whole KEY=VALUE, for messages
};

// What every check needs to word its message: the source name and the overrides applied.
class Context {
 public:
  explicit Context(std::string source) : source_(std::move(source)) {}

  void add_override(Override applied) { overrides_.push_back(std::move(applied)); }

  // Whether the value at `path` was written by an override (the override set it or a parent).
  bool set_by_override(const std::string& path) const {
    return std::any_of(overrides_.begin(), overrides_.end(),
                       [&](const Override& o) { return is_within(path, o.key); });
  }

  // The override that set exactly `path`, if any (the last one wins, as when applying them).
  const Override* exact_override(const std::string& path) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (it->key == path) return &*it;
    }
    return nullptr;
  }

  // "<source>: <path>: <message>", plus which --set it came from.
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    fail_about({path}, str_cat(path, ": ", message));
  }

  // "<source>: <message>", plus the --set overrides that touched any of `paths`: those that set a
  // path, one of its parents, or something inside it (e.g. an unknown key they created).
  [[noreturn]] void fail_about(const std::vector<std::string>& paths,
                               const std::string& message) const {
    std::vector<std::string> from;
    for (const Override& o : overrides_) {
      const bool touches = std::any_of(paths.begin(), paths.end(), [&](const std::string& p) {
        return !p.empty() && (is_within(p, o.key) || is_within(o.key, p));
      });
      if (touches && std::find(from.begin(), from.end(), o.text) == from.end()) {
        from.push_back(o.text);
      }
    }
    std::string text = str_cat(source_, ": ", message);
    if (!from.empty()) text += " (from --set " + quoted_list(from, "'") + ")";
    throw ConfigError(text);
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<Override> overrides_;
};

struct NumberRange {
  double lo;
  bool lo_inclusive;
  double hi;  // kInf: no upper bound
  bool hi_inclusive;

  bool contains(double x) const {
    const bool above = lo_inclusive ? x >= lo : x > lo;
    const bool below = hi == kInf || (hi_inclusive ? x <= hi : x < hi);
    return above && below;
  }

  std::string describe() const {
    if (hi == kInf) {
      if (lo == 0) return lo_inclusive ? "a non-negative number" : "a positive number";
      return str_cat("a number ", lo_inclusive ? ">= " : "> ", number_text(lo));
    }
    return str_cat("a number in ", lo_inclusive ? "[" : "(", number_text(lo), ", ", number_text(hi),
                   hi_inclusive ? "]" : ")");
  }
};

constexpr NumberRange kPositive{0, false, kInf, false};
constexpr NumberRange kNonNegative{0, true, kInf, false};
constexpr NumberRange kOpenUnit{0, false, 1, false};

std::string describe_int_range(int64_t lo, int64_t hi) {
  if (hi == kInt64Max && lo == 1) return "a positive integer";
  if (hi == kInt64Max && lo == 0) return "a non-negative integer";
  return str_cat("an integer in [", lo, ", ", hi, "]");
}

// One JSON object of the config at `path` ("" for the top level). Constructing it checks that the
// value is an object and that every key in it is known (Note [schema]); an absent object reads as
// empty. The read_* members leave the default in place when a key is absent.
class Level {
 public:
  Level(const Context& ctx, const Json* value, std::string path)
      : ctx_(ctx), value_(value), path_(std::move(path)), known_(schema_at(path_)) {
    PSTAR_INTERNAL_ASSERT(known_.is_object(), "'", path_, "' is not an object in the schema");
    if (value_ == nullptr) return;
    if (!value_->is_object())
      ctx_.fail(path_, "expected an object, found " + type_and_value(*value_));
    for (const auto& item : value_->items()) {
      if (!is_comment_key(item.key()) && !known_.contains(item.key())) fail_unknown(item.key());
    }
  }

  Level child(const std::string& key) const { return Level(ctx_, find(key), path(key)); }

  std::string path(const std::string& key) const { return join_path(path_, key); }

  template <typename Int>
  void read_int(const std::string& key, Int* out, int64_t lo, int64_t hi) const {
    if (const Json* v = find(key)) *out = static_cast<Int>(int_value(*v, path(key), lo, hi));
  }

  void read_optional_int(const std::string& key, std::optional<int64_t>* out, int64_t lo,
                         int64_t hi) const {
    const Json* v = find(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      out->reset();
    } else {
      *out = int_value(*v, path(key), lo, hi);
    }
  }

  void read_uint64(const std::string& key, uint64_t* out) const {
    const Json* v = find(key);
    if (v == nullptr) return;
    const char* expected = "expected a non-negative integer, found ";
    if (v->is_number_unsigned()) {
      *out = v->get<uint64_t>();
    } else if (v->is_number_integer()) {
      if (v->get<int64_t>() < 0) ctx_.fail(path(key), expected + shown(*v));
      *out = static_cast<uint64_t>(v->get<int64_t>());
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
      const double d = v->get<double>();
      if (d < 0 || d >= 0x1p64) ctx_.fail(path(key), expected + shown(*v));
      *out = static_cast<uint64_t>(d);
    } else {
      ctx_.fail(path(key), expected + type_and_value(*v));
    }
  }

  void read_number(const std::string& key, double* out, const NumberRange& range) const {
    if (const Json* v = find(key)) *out = number_value(*v, path(key), range);
  }

  // A number in `range`, or null (unset). An out-of-range value's message ends with `hint`.
  void read_optional_number(const std::string& key, std::optional<double>* out,
                            const NumberRange& range, const std::string& hint) const {
    const Json* v = find(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      out->reset();
      return;
    }
    if (v->is_number() && !range.contains(v->get<double>()))
      ctx_.fail(path(key),
                str_cat("expected ", range.describe(), ", found ", shown(*v), "; ", hint));
    *out = number_value(*v, path(key), range);
  }

  // A byte size: a positive integer (bytes) or a string such as "512MiB" or "80GiB"; null unsets.
  void read_optional_size(const std::string& key, std::optional<int64_t>* out) const {
    const Json* v = find(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      out->reset();
      return;
    }
    const char* expected =
        "expected a size such as \"512MiB\", \"80GiB\", \"1.5GB\" or a positive number of bytes, "
        "found ";
    if (v->is_string()) {
      if (auto bytes = parse_size_bytes(v->get<std::string>())) {
        *out = *bytes;
        return;
      }
      ctx_.fail(path(key), expected + shown(*v));
    }
    if (v->is_number_integer() || v->is_number_unsigned()) {
      *out = int_value(*v, path(key), 1, int64_t{1} << 62);
      return;
    }
    ctx_.fail(path(key), expected + type_and_value(*v));
  }

  void read_bool(const std::string& key, bool* out) const {
    const Json* v = find(key);
    if (v == nullptr) return;
    if (!v->is_boolean())
      ctx_.fail(path(key), "expected true or false, found " + type_and_value(*v));
    *out = v->get<bool>();
  }

  // true, false, or the string "auto".
  void read_on_off_auto(const std::string& key, OnOffAuto* out) const {
    const Json* v = find(key);
    if (v == nullptr) return;
    if (v->is_boolean()) {
      *out = on_off(v->get<bool>());
      return;
    }
    if (v->is_string() && v->get<std::string>() == "auto") {
      *out = OnOffAuto::kAuto;
      return;
    }
    ctx_.fail(path(key), "expected true, false or \"auto\", found " + type_and_value(*v));
  }

  void read_string(const std::string& key, std::string* out) const {
    if (const Json* v = find(key)) *out = string_value(*v, path(key), "a string");
  }

  // A string that must be one of `choices` (matched exactly); the message lists them and
  // suggests the closest. `note` explains more where that helps.
  void read_choice(const std::string& key, std::string* out,
                   const std::vector<std::string>& choices, const std::string& note = "") const {
    const Json* v = find(key);
    if (v == nullptr) return;
    const std::string expected =
        choices.size() == 1 ? quoted_list(choices, "\"") : "one of " + quoted_list(choices, "\"");
    const std::string value = string_value(*v, path(key), expected);
    if (std::find(choices.begin(), choices.end(), value) != choices.end()) {
      *out = value;
      return;
    }
    std::string message = str_cat("expected ", expected, ", found ", type_and_value(*v));
    if (!note.empty()) message += " (" + note + ")";
    if (auto suggestion = closest(value, choices))
      message += "; did you mean \"" + *suggestion + "\"?";
    ctx_.fail(path(key), message);
  }

  // A choice that may be null: the key is then unset (`*out` keeps its empty default).
  void read_optional_choice(const std::string& key, std::string* out,
                            const std::vector<std::string>& choices,
                            const std::string& note = "") const {
    const Json* v = find(key);
    if (v == nullptr || v->is_null()) return;
    read_choice(key, out, choices, note);
  }

  void read_number_pair(const std::string& key, std::array<double, 2>* out,
                        const NumberRange& range) const {
    const Json* v = find(key);
    if (v == nullptr) return;
    if (!v->is_array() || v->size() != 2) {
      ctx_.fail(path(key), str_cat("expected an array of 2 numbers, each ", range.describe(),
                                   ", found ", type_and_value(*v)));
    }
    for (size_t i = 0; i < 2; ++i) {
      (*out)[i] = number_value((*v)[i], str_cat(path(key), "[", i, "]"), range);
    }
  }

 private:
  // The value of `key`, or null when it is absent. Reading a key the schema lacks is a bug.
  const Json* find(const std::string& key) const {
    PSTAR_INTERNAL_ASSERT(known_.contains(key), "reading '", path(key),
                          "', which is not in the schema");
    if (value_ == nullptr) return nullptr;
    const auto it = value_->find(key);
    return it == value_->end() ? nullptr : &*it;
  }

  int64_t int_value(const Json& v, const std::string& path, int64_t lo, int64_t hi) const {
    const std::string expected = "expected " + describe_int_range(lo, hi) + ", found ";
    int64_t x = 0;
    bool representable = false;
    if (v.is_number_unsigned()) {
      representable = v.get<uint64_t>() <= static_cast<uint64_t>(kInt64Max);
      x = representable ? static_cast<int64_t>(v.get<uint64_t>()) : 0;
    } else if (v.is_number_integer()) {
      representable = true;
      x = v.get<int64_t>();
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
      // An integral float (4.0, 1e6) is accepted: JSON writers and --set produce them.
      const double d = v.get<double>();
      representable = d >= -0x1p63 && d < 0x1p63;
      x = representable ? static_cast<int64_t>(d) : 0;
    } else {
      ctx_.fail(path, expected + type_and_value(v));
    }
    if (!representable || x < lo || x > hi) ctx_.fail(path, expected + shown(v));
    return x;
  }

  double number_value(const Json& v, const std::string& path, const NumberRange& range) const {
    const std::string expected = "expected " + range.describe() + ", found ";
    if (!v.is_number()) ctx_.fail(path, expected + type_and_value(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || !range.contains(x)) ctx_.fail(path, expected + shown(v));
    return x;
  }

  std::string string_value(const Json& v, const std::string& path,
                           const std::string& expected) const {
    if (v.is_string()) return v.get<std::string>();
    std::string message = str_cat("expected ", expected, ", found ", type_and_value(v));
    if (const Override* o = ctx_.exact_override(path); o != nullptr && v.is_primitive()) {
      // --set parsed the value as JSON (a number, true, null); say how to pass it as a string.
      message += str_cat("; --set reads VALUE as JSON when it can, so quote a string: --set '",
                         o->key, "=\"", o->text.substr(o->key.size() + 1), "\"'");
    }
    ctx_.fail(path, message);
  }

  [[noreturn]] void fail_unknown(const std::string& key) const {
    const std::string unknown = path(key);
    std::vector<std::string> here;
    for (const auto& item : known_.items()) here.push_back(item.key());
    std::string message = "unknown key '" + unknown + "'";
    if (auto suggestion = closest(key, here)) {
      message += "; did you mean '" + path(*suggestion) + "'?";
    } else {
      // Not a typo here; perhaps the key belongs at another level ("lr" at the top).
      std::vector<std::string> all;
      std::vector<std::string> elsewhere;
      collect_paths(schema(), "", &all);
      for (const std::string& p : all) {
        const std::string last = p.substr(p.rfind('.') == std::string::npos ? 0 : p.rfind('.') + 1);
        if (lower(last) == lower(key)) elsewhere.push_back(p);
      }
      if (!elsewhere.empty()) {
        message += "; did you mean " + alternatives(elsewhere) + "?";
      } else {
        message += path_.empty() ? "; the top-level keys are: "
                                 : "; the keys allowed in '" + path_ + "' are: ";
        message += quoted_list(here, "");
      }
    }
    ctx_.fail_about({unknown}, message);
  }

  const Context& ctx_;
  const Json* value_;  // null when the object is absent
  std::string path_;
  const Json& known_;  // this level of the schema
};

// Note [JSON depth]: nlohmann parses any depth without recursion, but dump() recurses once per
// level, and messages show values through it (shown()): a value nested ~100k levels deep
// overflowed the stack (found by tests/fuzz). A config nests four levels at most, so anything past
// this is refused while parsing, before it can reach a message.
constexpr int kMaxJsonDepth = 100;

// A parser callback that throws `error` once the JSON nests deeper than kMaxJsonDepth.
Json::parser_callback_t depth_limit(const std::string& error) {
  return [error](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) throw ConfigError(error);
    return true;
  };
}

Json parse_json(const std::string& text, const std::string& source) {
  try {
    return Json::parse(
        text, depth_limit(str_cat(source, ": invalid JSON: nested deeper than ", kMaxJsonDepth,
                                  " levels; a pstar config nests 4 at most")));
  } catch (const Json::parse_error& e) {
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 3, column 5:
    // ..."; keep it from "parse error" on, which carries the line and column.
    std::string what = e.what();
    const size_t start = what.find("] ");
    if (start != std::string::npos) what = what.substr(start + 2);
    PSTAR_THROW(ConfigError, source, ": invalid JSON: ", what, " (byte ", e.byte, ")");
  } catch (const Json::exception& e) {
    // E.g. out_of_range.406 for a number too large for a double (1e999).
    std::string what = e.what();
    const size_t start = what.find("] ");
    if (start != std::string::npos) what = what.substr(start + 2);
    PSTAR_THROW(ConfigError, source, ": invalid JSON: ", what);
  }
}

// Applies one `--set KEY=VALUE` to the parsed file (see config.h and docs/config.md).
void apply_override(const std::string& text, Json* root, Context* ctx) {
  const std::string form =
      "expected KEY=VALUE, where KEY is a dotted path such as optimizer.params.lr";
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    PSTAR_THROW(ConfigError, ctx->source(), ": --set '", text, "': ", form);
  }
  const std::string key = text.substr(0, eq);
  std::vector<std::string> names;
  for (size_t start = 0; start <= key.size();) {
    const size_t dot = std::min(key.find('.', start), key.size());
    names.push_back(key.substr(start, dot - start));
    start = dot + 1;
  }
  if (std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.empty(); })) {
    PSTAR_THROW(ConfigError, ctx->source(), ": --set '", text, "': ", form,
                " (KEY has an empty name between dots)");
  }

  const std::string value_text = text.substr(eq + 1);
  // Note [JSON depth]
  Json value = Json::parse(
      value_text,
      depth_limit(str_cat(ctx->source(), ": --set '", cut_to_shown_length(text),
                          "': VALUE is JSON nested deeper than ", kMaxJsonDepth, " levels")),
      /*allow_exceptions=*/false);
  if (value.is_discarded()) value = value_text;

  Json* node = root;
  std::string walked;
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    walked = join_path(walked, names[i]);
    const auto it = node->find(names[i]);
    if (it == node->end()) {
      node = &((*node)[names[i]] = Json::object());
    } else if (it->is_object()) {
      node = &*it;
    } else {
      PSTAR_THROW(ConfigError, ctx->source(), ": --set '", text, "': cannot set '", key,
                  "' because '", walked, "' is not an object (it is ", type_and_value(*it), ")");
    }
  }
  (*node)[names.back()] = std::move(value);
  ctx->add_override({key, text});
}

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

TrainConfig parse_train_config(const std::string& json_text, const std::string& source,
                               const std::string& base_dir,
                               const std::vector<std::string>& overrides) {
  Context ctx(source);
  Json root = parse_json(json_text, source);
  if (!root.is_object()) {
    PSTAR_THROW(ConfigError, source, ": expected a JSON object at the top level, found ",
                type_and_value(root));
  }
  for (const std::string& text : overrides) apply_override(text, &root, &ctx);
  TrainConfig config = read_config(ctx, root, base_dir);
  config.source = source;
  return config;
}

std::string to_json_text(const TrainConfig& config) {
  return to_json(config).dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace pstar::config
