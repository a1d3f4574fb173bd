// Level: typed reads of one object of the config (config/level.h).
#include "config/level.h"

#include <cmath>
#include <utility>

#include "config/schema.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"

namespace pstar::config::detail {
namespace {

std::string describe_int_range(int64_t lo, int64_t hi) {
  if (hi == kInt64Max && lo == 1) return "a positive integer";
  if (hi == kInt64Max && lo == 0) return "a non-negative integer";
  return str_cat("an integer in [", lo, ", ", hi, "]");
}

}  // namespace

Level::Level(const Context& ctx, const Json* value, std::string path)
    : ctx_(ctx), value_(value), path_(std::move(path)), known_(schema_at(path_)) {
  PSTAR_INTERNAL_ASSERT(known_.is_object(), "'", path_, "' is not an object in the schema");
  if (value_ == nullptr) return;
  if (!value_->is_object())
    ctx_.fail(path_, "expected an object, found " + type_and_value(*value_));
  for (const auto& item : value_->items()) {
    if (!is_comment_key(item.key()) && !known_.contains(item.key())) fail_unknown(item.key());
  }
}

void Level::read_optional_int(const std::string& key, std::optional<int64_t>* out, int64_t lo,
                              int64_t hi) const {
  const Json* v = find(key);
  if (v == nullptr) return;
  if (v->is_null()) {
    out->reset();
  } else {
    *out = int_value(*v, path(key), lo, hi);
  }
}

void Level::read_uint64(const std::string& key, uint64_t* out) const {
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

void Level::read_number(const std::string& key, double* out, const NumberRange& range) const {
  if (const Json* v = find(key)) *out = number_value(*v, path(key), range);
}

void Level::read_optional_number(const std::string& key, std::optional<double>* out,
                                 const NumberRange& range, const std::string& hint) const {
  const Json* v = find(key);
  if (v == nullptr) return;
  if (v->is_null()) {
    out->reset();
    return;
  }
  if (v->is_number() && !range.contains(v->get<double>()))
    ctx_.fail(path(key), str_cat("expected ", range.describe(), ", found ", shown(*v), "; ", hint));
  *out = number_value(*v, path(key), range);
}

void Level::read_optional_size(const std::string& key, std::optional<int64_t>* out) const {
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

void Level::read_bool(const std::string& key, bool* out) const {
  const Json* v = find(key);
  if (v == nullptr) return;
  if (!v->is_boolean()) ctx_.fail(path(key), "expected true or false, found " + type_and_value(*v));
  *out = v->get<bool>();
}

void Level::read_on_off_auto(const std::string& key, OnOffAuto* out) const {
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

void Level::read_string(const std::string& key, std::string* out) const {
  if (const Json* v = find(key)) *out = string_value(*v, path(key), "a string");
}

void Level::read_json_object(const std::string& key, std::string* out) const {
  const Json* v = find(key);
  if (v == nullptr) return;
  if (!v->is_null() && !v->is_object())
    ctx_.fail(path(key), "expected a JSON object (or null), found " + type_and_value(*v));
  *out = v->is_null() || v->empty() ? "" : v->dump();
}

void Level::read_prompt_list(const std::string& key, std::vector<std::string>* out) const {
  const Json* v = find(key);
  if (v == nullptr || v->is_null()) return;
  if (!v->is_array())
    ctx_.fail(path(key),
              "expected a list of prompts (strings, or {\"messages\": [...]} "
              "objects), found " +
                  type_and_value(*v));
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& item = (*v)[i];
    if (item.is_string())
      out->push_back(Json{{"prompt", item}}.dump());
    else if (item.is_object())
      out->push_back(item.dump());
    else
      ctx_.fail(str_cat(path(key), "[", i, "]"),
                "expected a prompt string or an object, found " + type_and_value(item));
  }
}

void Level::read_choice(const std::string& key, std::string* out,
                        const std::vector<std::string>& choices, const std::string& note) const {
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

void Level::read_optional_choice(const std::string& key, std::string* out,
                                 const std::vector<std::string>& choices,
                                 const std::string& note) const {
  const Json* v = find(key);
  if (v == nullptr || v->is_null()) return;
  read_choice(key, out, choices, note);
}

void Level::read_number_pair(const std::string& key, std::array<double, 2>* out,
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

const Json* Level::find(const std::string& key) const {
  PSTAR_INTERNAL_ASSERT(known_.contains(key), "reading '", path(key),
                        "', which is not in the schema");
  if (value_ == nullptr) return nullptr;
  const auto it = value_->find(key);
  return it == value_->end() ? nullptr : &*it;
}

int64_t Level::int_value(const Json& v, const std::string& path, int64_t lo, int64_t hi) const {
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

double Level::number_value(const Json& v, const std::string& path, const NumberRange& range) const {
  const std::string expected = "expected " + range.describe() + ", found ";
  if (!v.is_number()) ctx_.fail(path, expected + type_and_value(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || !range.contains(x)) ctx_.fail(path, expected + shown(v));
  return x;
}

std::string Level::string_value(const Json& v, const std::string& path,
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

void Level::fail_unknown(const std::string& key) const {
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

}  // namespace pstar::config::detail
