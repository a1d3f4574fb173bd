// The pieces config messages are made of (private to formats/src/config*): JSON paths, values
// shown briefly, lists of choices, and the closest known key or choice for a typo.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace pstar::config::detail {

// ordered_json keeps the file's key order, so the first problem reported is the first one in the
// file, and to_json_text writes the keys in the documented order.
using Json = nlohmann::ordered_json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string join_path(const std::string& parent, const std::string& key);

// `inner` is `outer` itself or lies inside it ("a.b" is inside "a", "ab" is not).
bool is_within(const std::string& inner, const std::string& outer);

// Keys that document a config file rather than configure anything.
bool is_comment_key(const std::string& key);

// `text` cut to about 60 characters, never inside a UTF-8 sequence.
std::string cut_to_shown_length(std::string text);

// The JSON text of a value, cut to about 60 characters so that an object never floods a message.
std::string shown(const Json& value);

// What a value is, for "found ..." in messages: `string "ten"`, `number 3.5`, `null`.
std::string type_and_value(const Json& value);

// A number for a message: integral values without a fraction ("[0, 1)"), others as JSON writes
// them.
std::string number_text(double value);

// "<q>a<q>, <q>b<q>".
std::string quoted_list(const std::vector<std::string>& items, const std::string& quote);

// "'a'", "'a' or 'b'", "'a', 'b' or 'c'".
std::string alternatives(const std::vector<std::string>& items);

std::string lower(std::string text);

// The candidate closest to `word`, if it is close enough to be a plausible typo: within
// max(2, len/3) edits, ignoring ASCII case. Ties go to the earlier candidate (the documented
// order).
std::optional<std::string> closest(const std::string& word,
                                   const std::vector<std::string>& candidates);

}  // namespace pstar::config::detail
