#include "pstar/base/format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace pstar {

std::string format_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  return buf;
}

std::string format_fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

}  // namespace pstar
