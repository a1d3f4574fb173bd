#include "pstar/checkpoint/schema.h"

#include <cctype>

namespace pstar::checkpoint {

std::optional<std::pair<std::string, int64_t>> parse_piece_name(const std::string& stored) {
  const size_t mark = stored.rfind(kPieceMark);
  if (mark == std::string::npos || mark == 0 || mark + 1 == stored.size() ||
      stored.size() - mark - 1 > 18)
    return std::nullopt;
  int64_t begin = 0;
  for (size_t i = mark + 1; i < stored.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(stored[i]))) return std::nullopt;
    begin = begin * 10 + (stored[i] - '0');
  }
  return std::make_pair(stored.substr(0, mark), begin);
}

}  // namespace pstar::checkpoint
