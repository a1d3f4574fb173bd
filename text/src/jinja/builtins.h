// The filters, tests, methods and global functions chat templates use, with the meanings of
// Jinja2 under Hugging Face's apply_chat_template (Python's str methods, its own tojson).
#pragma once

#include <string>

#include "value.h"

namespace pstar::text::jinja {

// `value | name(args)`. Throws FormatError (args.where names the place) for an unknown filter
// or arguments it cannot take.
Value apply_filter(const std::string& name, const Value& value, CallArgs& args);

// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, CallArgs& args);

// `value.name`: a dict's key, or a bound method of a string, list or dict; undefined otherwise.
Value attribute(const Value& value, const std::string& name);

// Python's json.dumps(value, ensure_ascii=False, indent=indent, separators=default) as
// Hugging Face's tojson calls it; indent < 0 means None.
std::string to_json(const Value& value, int indent);

// Python's str.strip() of Unicode whitespace, or with `chars` str.strip(chars) (any of its
// characters), keeping origins (Note [string origins]).
Str strip(const Str& s, bool left, bool right, const std::string* chars = nullptr);

// Python's len() of a string: code points, not bytes.
int64_t code_points(const std::string& s);

}  // namespace pstar::text::jinja
