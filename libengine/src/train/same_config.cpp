#include "same_config.h"

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"

namespace pstar::train {

void check_same_config(dist::Communicator& comm, const config::TrainConfig& config) {
  const auto texts = comm.exchange("config", config::to_json_text(config));
  for (int64_t r = 1; r < comm.world_size(); ++r) {
    if (texts[r] == texts[0]) continue;
    const auto mine = nlohmann::json::parse(texts[r]).flatten();
    const auto first = nlohmann::json::parse(texts[0]).flatten();
    std::string key = "(unknown)", theirs = "absent", ours = "absent";
    for (const auto& [k, v] : first.items()) {
      if (mine.contains(k) && mine[k] == v) continue;
      key = k;
      ours = v.dump();
      theirs = mine.contains(k) ? mine[k].dump() : "absent";
      break;
    }
    if (key == "(unknown)") {
      for (const auto& [k, v] : mine.items()) {
        if (first.contains(k)) continue;
        key = k;
        theirs = v.dump();
        break;
      }
    }
    // JSON pointer "/training/steps" -> the config's own spelling "training.steps".
    std::replace(key.begin(), key.end(), '/', '.');
    if (!key.empty() && key[0] == '.') key.erase(0, 1);
    PSTAR_THROW(ConfigError, "rank ", r, "'s config differs from rank 0's at ", key, ": ", theirs,
                " vs ", ours, "; every rank must start with the same config and --set options");
  }
}

}  // namespace pstar::train
