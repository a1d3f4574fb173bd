// Byte sizes as people write them: "512MiB", "80GiB", "1.5GB", "4096" (bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pstar {

// Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) units, case-insensitive, optional
// space; a bare number is bytes. nullopt for anything else, zero, negative or > 2^62.
std::optional<int64_t> parse_size_bytes(const std::string& text);

// "1.50 GiB", "512.00 MiB", "17 B": for messages.
std::string format_bytes(int64_t bytes);

}  // namespace pstar
