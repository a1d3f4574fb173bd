#include "pstar/base/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pstar {

std::optional<int64_t> parse_size_bytes(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value) || value <= 0) return std::nullopt;
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  for (auto& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  struct Unit {
    const char* name;
    double scale;
  };
  static const Unit units[] = {{"", 1},         {"b", 1},        {"kib", 0x1p10}, {"mib", 0x1p20},
                               {"gib", 0x1p30}, {"tib", 0x1p40}, {"kb", 1e3},     {"mb", 1e6},
                               {"gb", 1e9},     {"tb", 1e12},    {"k", 0x1p10},   {"m", 0x1p20},
                               {"g", 0x1p30},   {"t", 0x1p40}};
  for (const auto& u : units) {
    if (unit != u.name) continue;
    const double bytes = std::floor(value * u.scale);
    if (bytes < 1 || bytes > 0x1p62) return std::nullopt;
    return static_cast<int64_t>(bytes);
  }
  return std::nullopt;
}

std::string format_bytes(int64_t bytes) {
  static const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (std::fabs(v) >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  char buf[48];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, names[i]);
  return buf;
}

}  // namespace pstar
