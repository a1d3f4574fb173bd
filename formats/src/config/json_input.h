// The config's JSON text and its --set overrides (private to formats/src/config*): parsing with
// a depth limit (Note [JSON depth] in json_input.cpp) and applying KEY=VALUE to the parsed tree.
#pragma once

#include <string>

#include "config/context.h"
#include "config/messages.h"

namespace pstar::config::detail {

// The parsed text; ConfigError naming `source`, the line and the column when it is not JSON.
Json parse_json(const std::string& text, const std::string& source);

// Applies one `--set KEY=VALUE` to the parsed file (see config.h and docs/config.md) and records
// it in `ctx` for messages.
void apply_override(const std::string& text, Json* root, Context* ctx);

}  // namespace pstar::config::detail
