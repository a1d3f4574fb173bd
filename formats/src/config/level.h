// Reading one level (JSON object) of the config with typed, range-checked reads (private to
// formats/src/config*). Every message names the key's path, what was expected and what was found,
// and suggests the closest key or choice for a typo.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/context.h"
#include "config/messages.h"
#include "pstar/base/strings.h"
#include "pstar/formats/config.h"

namespace pstar::config::detail {

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

// One JSON object of the config at `path` ("" for the top level). Constructing it checks that the
// value is an object and that every key in it is known (Note [schema]); an absent object reads as
// empty. The read_* members leave the default in place when a key is absent.
class Level {
 public:
  Level(const Context& ctx, const Json* value, std::string path);

  Level child(const std::string& key) const { return Level(ctx_, find(key), path(key)); }

  std::string path(const std::string& key) const { return join_path(path_, key); }

  template <typename Int>
  void read_int(const std::string& key, Int* out, int64_t lo, int64_t hi) const {
    if (const Json* v = find(key)) *out = static_cast<Int>(int_value(*v, path(key), lo, hi));
  }

  void read_optional_int(const std::string& key, std::optional<int64_t>* out, int64_t lo,
                         int64_t hi) const;

  void read_uint64(const std::string& key, uint64_t* out) const;

  void read_number(const std::string& key, double* out, const NumberRange& range) const;

  // A number in `range`, or null (unset). An out-of-range value's message ends with `hint`.
  void read_optional_number(const std::string& key, std::optional<double>* out,
                            const NumberRange& range, const std::string& hint) const;

  // A byte size: a positive integer (bytes) or a string such as "512MiB" or "80GiB"; null unsets.
  void read_optional_size(const std::string& key, std::optional<int64_t>* out) const;

  void read_bool(const std::string& key, bool* out) const;

  // true, false, or the string "auto".
  void read_on_off_auto(const std::string& key, OnOffAuto* out) const;

  void read_string(const std::string& key, std::string* out) const;

  // A JSON object of any keys and values, kept as its text (compact); null or {} read as "".
  void read_json_object(const std::string& key, std::string* out) const;

  // A list of prompts: strings (kept as {"prompt": string}) or objects, each kept as its JSON
  // text; their shapes are checked where they are read (text/prompts.h).
  void read_prompt_list(const std::string& key, std::vector<std::string>* out) const;

  // A string that must be one of `choices` (matched exactly); the message lists them and
  // suggests the closest. `note` explains more where that helps.
  void read_choice(const std::string& key, std::string* out,
                   const std::vector<std::string>& choices, const std::string& note = "") const;

  // A choice that may be null: the key is then unset (`*out` keeps its empty default).
  void read_optional_choice(const std::string& key, std::string* out,
                            const std::vector<std::string>& choices,
                            const std::string& note = "") const;

  void read_number_pair(const std::string& key, std::array<double, 2>* out,
                        const NumberRange& range) const;

 private:
  // The value of `key`, or null when it is absent. Reading a key the schema lacks is a bug.
  const Json* find(const std::string& key) const;

  int64_t int_value(const Json& v, const std::string& path, int64_t lo, int64_t hi) const;

  double number_value(const Json& v, const std::string& path, const NumberRange& range) const;

  std::string string_value(const Json& v, const std::string& path,
                           const std::string& expected) const;

  [[noreturn]] void fail_unknown(const std::string& key) const;

  const Context& ctx_;
  const Json* value_;  // null when the object is absent
  std::string path_;
  const Json& known_;  // this level of the schema
};

}  // namespace pstar::config::detail
