// Reading one JSON Lines record (records/parse.h).
#include "records/parse.h"

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "utf8.h"

namespace pstar::text::records {
namespace {

using Json = nlohmann::json;

// A record nests 4 levels ({"messages": [{"content": ...}]}); a deeper line is refused while
// parsing, so that nothing recursive (dump, our walk) ever meets a pathological depth.
constexpr int kMaxDepth = 64;

struct TooDeep {};

BadRecord bad(const char* kind, std::string message) { return {kind, std::move(message)}; }

// A value for a message, cut to about 40 characters (never inside a UTF-8 sequence).
std::string shown(const Json& v) {
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() <= 40) return text;
  size_t cut = 37;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

std::string type_and_value(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "the boolean " + shown(v);
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "the number " + shown(v);
    case Json::value_t::string:
      return "the string " + shown(v);
    case Json::value_t::array:
      return "a list";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return "a value";
}

std::optional<Json> parse_json(std::string_view line, std::string* error) {
  try {
    return Json::parse(line, [](int depth, Json::parse_event_t, Json&) {
      if (depth > kMaxDepth) throw TooDeep{};
      return true;
    });
  } catch (const Json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." from "column" on.
    std::string what = e.what();
    const size_t at = what.find("column ");
    *error = at == std::string::npos ? what : what.substr(at);
    return std::nullopt;
  } catch (const Json::exception& e) {
    // E.g. out_of_range.406, a number too large for a double (1e999; found by records_fuzz).
    std::string what = e.what();
    const size_t at = what.find("] ");
    *error = at == std::string::npos ? what : what.substr(at + 2);
    return std::nullopt;
  } catch (const TooDeep&) {
    *error = "nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return std::nullopt;
  }
}

// The path of the first string (in document order) that holds U+FFFF, the mark put where the
// line had invalid UTF-8; "" when none does.
std::string marked_field(const Json& v, const std::string& path) {
  static const std::string kMark = "\xEF\xBF\xBF";
  if (v.is_string())
    return v.get_ref<const std::string&>().find(kMark) != std::string::npos ? path : "";
  if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      std::string found = marked_field(v[i], path + "[" + std::to_string(i) + "]");
      if (!found.empty()) return found;
    }
  } else if (v.is_object()) {
    for (const auto& item : v.items()) {
      const std::string inner = path.empty() ? item.key() : path + "." + item.key();
      if (item.key().find(kMark) != std::string::npos) return inner + " (its name)";
      std::string found = marked_field(item.value(), inner);
      if (!found.empty()) return found;
    }
  }
  return "";
}

// Invalid UTF-8 on the line: where it is, and in which field when that can be told (each invalid
// byte replaced by the escape \uFFFF, the line parsed again and the mark looked for).
BadRecord invalid_utf8(std::string_view line, size_t first_bad) {
  std::string marked;
  size_t pos = 0;
  while (pos < line.size()) {
    const Utf8Check check = check_utf8(line.substr(pos));
    marked.append(line.substr(pos, check.valid));
    pos += check.valid;
    if (pos < line.size()) {
      marked += "\\uFFFF";
      ++pos;
    }
  }
  std::string where;
  std::string ignored;
  if (auto parsed = parse_json(marked, &ignored)) where = marked_field(*parsed, "");
  return bad("invalid UTF-8", "invalid UTF-8 at byte " + std::to_string(first_bad + 1) +
                                  " of the line" + (where.empty() ? "" : " (in " + where + ")") +
                                  "; records must be UTF-8 text");
}

std::optional<BadRecord> read_messages(const Json& list, ParsedRecord& out) {
  if (!list.is_array())
    return bad("wrong type", "messages is " + type_and_value(list) +
                                 ", expected a list of {\"role\", \"content\"} objects");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const Json& m = list[i];
    if (!m.is_object())
      return bad("wrong type",
                 at + " is " + type_and_value(m) + ", expected an object with role and content");
    const auto role = m.find("role");
    if (role == m.end())
      return bad("missing field", at + " has no role (one of \"system\", \"user\", \"assistant\")");
    if (!role->is_string())
      return bad("wrong type", at + ".role is " + type_and_value(*role) + ", expected a string");
    const std::string& name = role->get_ref<const std::string&>();
    if (name != "system" && name != "user" && name != "assistant")
      return bad("unknown role", at + ".role is " + shown(*role) +
                                     "; the roles allowed are \"system\", \"user\" and "
                                     "\"assistant\"");
    const auto content = m.find("content");
    if (content == m.end()) return bad("content not a string", at + " has no content (a string)");
    if (!content->is_string())
      return bad("content not a string",
                 at + ".content is " + type_and_value(*content) + ", expected a string");
    ChatMessage message{name, content->get<std::string>(), std::nullopt};
    // An assistant's reasoning apart from its content, for templates that read it (Qwen3's).
    const auto reasoning = m.find("reasoning_content");
    if (reasoning != m.end() && !reasoning->is_null()) {
      if (!reasoning->is_string())
        return bad("wrong type", at + ".reasoning_content is " + type_and_value(*reasoning) +
                                     ", expected a string or null");
      message.reasoning_content = reasoning->get<std::string>();
    }
    out.messages.push_back(std::move(message));
  }
  return std::nullopt;
}

std::optional<BadRecord> read_string(const Json& object, const char* key, std::string& out) {
  const auto it = object.find(key);
  if (it == object.end())
    return bad("missing field", std::string("has no \"") + key + "\" (a string)");
  if (!it->is_string())
    return bad("wrong type",
               std::string(key) + " is " + type_and_value(*it) + ", expected a string");
  out = it->get<std::string>();
  return std::nullopt;
}

}  // namespace

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

std::optional<BadRecord> parse_record(std::string_view line, ParsedRecord& out, bool prompt_only) {
  out = ParsedRecord{};
  const Utf8Check check = check_utf8(line);
  if (check.invalid || check.valid != line.size()) return invalid_utf8(line, check.valid);
  std::string error;
  const std::optional<Json> parsed = parse_json(line, &error);
  if (!parsed) return bad("not JSON", "not JSON: " + error);
  const Json& j = *parsed;
  if (!j.is_object())
    return bad("not an object", "the line is " + type_and_value(j) +
                                    ", expected an object: {\"messages\": [...]}, {\"prompt\", "
                                    "\"completion\"} or {\"text\"}");
  const bool messages = j.contains("messages");
  const bool pair = j.contains("prompt") || j.contains("completion");
  const bool text = j.contains("text");
  const int shapes = int{messages} + int{pair} + int{text};
  if (shapes != 1) {
    return bad("unknown shape",
               std::string(shapes == 0 ? "has none of" : "has more than one of") +
                   " \"messages\", \"prompt\"/\"completion\" and \"text\"; a record is "
                   "{\"messages\": [{\"role\", \"content\"}, ...]}, {\"prompt\", \"completion\"} "
                   "or {\"text\"}");
  }
  if (messages) {
    out.shape = Shape::kMessages;
    return read_messages(j["messages"], out);
  }
  if (pair) {
    out.shape = Shape::kPair;
    if (auto b = read_string(j, "prompt", out.prompt)) return b;
    if (prompt_only && !j.contains("completion")) return std::nullopt;
    return read_string(j, "completion", out.completion);
  }
  out.shape = Shape::kText;
  return read_string(j, "text", out.text);
}

}  // namespace pstar::text::records
