// Message pieces and typo suggestions for the config parser (config/messages.h).
#include "config/messages.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "pstar/base/strings.h"

namespace pstar::config::detail {
namespace {

constexpr size_t kMaxShownChars = 60;

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

}  // namespace

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

}  // namespace pstar::config::detail
