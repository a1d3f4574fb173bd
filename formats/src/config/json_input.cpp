// Parsing the config's JSON and applying --set overrides (config/json_input.h).
#include "config/json_input.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "pstar/base/error.h"

namespace pstar::config::detail {
namespace {

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

}  // namespace

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

}  // namespace pstar::config::detail
