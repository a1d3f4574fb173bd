// The config as JSON (private to formats/src/config*): to_json() writes every key of a
// TrainConfig, and the same tree is the schema the parser checks keys against (Note [schema]).
#pragma once

#include <string>
#include <vector>

#include "config/messages.h"
#include "pstar/formats/config.h"

namespace pstar::config::detail {

// The config with every key present, in the documented order.
Json to_json(const TrainConfig& c);

// Note [schema] (in schema.cpp): the tree to_json() writes for a default TrainConfig.
const Json& schema();
// The schema's node at a dotted path ("" for the top); asserts that it exists.
const Json& schema_at(const std::string& path);
// Every dotted path under `node`, objects and leaves, in order.
void collect_paths(const Json& node, const std::string& prefix, std::vector<std::string>* out);

}  // namespace pstar::config::detail
