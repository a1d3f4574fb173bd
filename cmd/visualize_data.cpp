// `pstar visualize`'s plot data: the profile's columns checked against each other before anything
// indexes them, and turned into MiB series per memory tier.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "visualize_parts.h"

namespace pstar::cmd::visualize_parts {

// Plot coordinates index the profile's columns, so a profile that read_profile accepted but whose
// columns disagree must stop here with a FormatError, not read out of bounds.
void check_profile(const std::string& path, const Profile& p) {
  const size_t n = p.by_moment.size();
  PSTAR_CHECK(n > 0, ConfigError, "nothing to plot: the profile '", path,
              "' has no recorded moments; record more steps");
  auto rows = [&](const char* name, size_t size, size_t expected) {
    PSTAR_CHECK(size == expected, FormatError, path, ": ", name, " has ", size, " rows; expected ",
                expected);
  };
  auto memory = [&](const char* group, const ProfileMemory& m, bool by_moment) {
    const std::string g = std::string("/memory/") + group + "/";
    const size_t rows_expected = m.size();
    if (by_moment) {
      rows((g + "step").c_str(), m.step.size(), rows_expected);
      rows((g + "moment").c_str(), m.moment.size(), rows_expected);
    }
    rows((g + "stage").c_str(), m.stage.size(), rows_expected);
    rows((g + "device_total").c_str(), m.device_total.size(), rows_expected);
    rows((g + "device_chunks").c_str(), m.device_chunks.size(), rows_expected);
    rows((g + "device_non_model").c_str(), m.device_non_model.size(), rows_expected);
    rows((g + "host_total").c_str(), m.host_total.size(), rows_expected);
    rows((g + "host_chunks").c_str(), m.host_chunks.size(), rows_expected);
    rows((g + "host_non_model").c_str(), m.host_non_model.size(), rows_expected);
    for (const int8_t s : m.stage)
      PSTAR_CHECK(s >= 0 && s <= 2, FormatError, path, ": ", g, "stage has the value ",
                  static_cast<int>(s), "; expected 0 (forward), 1 (backward) or 2 (optimizer)");
  };
  memory("by_moment", p.by_moment, true);
  memory("by_time", p.by_time, false);
  rows("/location", p.location.size(), n * p.chunks.size());
  for (const int8_t v : p.location)
    PSTAR_CHECK(v >= 0 && v <= 3, FormatError, path, ": /location has the value ",
                static_cast<int>(v), "; expected 0 (absent), 1 (host), 2 (device) or 3 (nvme)");
  const auto& e = p.events;
  rows("/events/moment", e.moment.size(), e.size());
  rows("/events/kind", e.kind.size(), e.size());
  rows("/events/bytes", e.bytes.size(), e.size());
  for (const int64_t m : e.moment)
    PSTAR_CHECK(m >= -1 && m < static_cast<int64_t>(n), FormatError, path,
                ": /events/moment has the value ", m,
                "; expected -1 or a row of /memory/by_moment (", n, " rows)");
}

std::vector<double> mib(const std::vector<int64_t>& bytes) {
  std::vector<double> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<double>(bytes[i]) / kMiB;
  return out;
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

Tier tier_of(const Profile& p, const ProfileMemory& m, const std::string& name) {
  Tier t;
  t.name = name;
  const bool device = name == "device";
  t.total = mib(device ? m.device_total : m.host_total);
  t.chunks = mib(device ? m.device_chunks : m.host_chunks);
  t.non_model = mib(device ? m.device_non_model : m.host_non_model);
  t.budget = device ? p.run.device_budget : p.run.host_budget;
  return t;
}

}  // namespace pstar::cmd::visualize_parts
