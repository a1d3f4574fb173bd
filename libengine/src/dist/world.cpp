#include "pstar/dist/world.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "pstar/base/error.h"

namespace pstar::dist {
namespace {

constexpr int kDefaultPort = 29500;
constexpr const char* kDefaultAddr = "127.0.0.1";

// A value and the words that name where it came from, for error messages: "RANK=3", or
// "LOCAL_RANK (unset, so RANK=3)" when it was defaulted from another variable.
struct Sourced {
  int64_t value = 0;
  std::string source;
};

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// `example` is a value that would work, for the message.
Sourced read_int(const std::string& name, const std::string& text, const char* example = "0") {
  std::optional<int64_t> value = parse_int(text);
  PSTAR_CHECK(value, ConfigError, name, "='", text,
              "' is not an integer; it must be a decimal whole number such as ", example);
  return {*value, str_cat(name, "=", *value)};
}

// The named variable as an integer, or `fallback` when it is unset.
Sourced int_or(const EnvReader& env, const std::string& name, const Sourced& fallback,
               const std::string& fallback_words, const char* example = "0") {
  std::optional<std::string> text = env(name);
  if (!text) return {fallback.value, str_cat(name, " (unset, so ", fallback_words, ")")};
  return read_int(name, *text, example);
}

void check_world(const Sourced& rank, const Sourced& world, const Sourced& local_rank,
                 const Sourced& local_world) {
  PSTAR_CHECK(world.value >= 1, ConfigError, world.source,
              " is not a world size; it must be at least 1");
  PSTAR_CHECK(rank.value >= 0 && rank.value < world.value, ConfigError, rank.source,
              " is outside [0, ", world.value, ") for ", world.source, "; ranks run from 0 to ",
              world.value - 1);
  PSTAR_CHECK(local_world.value >= 1 && local_world.value <= world.value, ConfigError,
              local_world.source, " is not a number of ranks on this host; it must be in 1..",
              world.value, " (", world.source, ")");
  PSTAR_CHECK(local_rank.value >= 0 && local_rank.value < local_world.value, ConfigError,
              local_rank.source, " is outside [0, ", local_world.value, ") for ",
              local_world.source, "; local ranks run from 0 to ", local_world.value - 1);
}

int read_port(const EnvReader& env) {
  std::optional<std::string> text = env("MASTER_PORT");
  if (!text) return kDefaultPort;
  Sourced port = read_int("MASTER_PORT", *text, "29500");
  PSTAR_CHECK(port.value >= 1 && port.value <= 65535, ConfigError, port.source,
              " is outside 1..65535; set it to a free TCP port such as ", kDefaultPort);
  return static_cast<int>(port.value);
}

std::string read_addr(const EnvReader& env, const std::string& fallback) {
  std::optional<std::string> addr = env("MASTER_ADDR");
  if (!addr) return fallback;
  PSTAR_CHECK(!addr->empty(), ConfigError,
              "MASTER_ADDR is set but empty; set it to the host name or address of rank 0, or "
              "unset it");
  return *addr;
}

// Slurm's compressed task counts, one entry per node: "2(x3),1" is 2, 2, 2, 1. The entry for
// `node` (SLURM_NODEID), or the first when the node is unknown.
Sourced tasks_on_node(const std::string& name, const std::string& text,
                      std::optional<int64_t> node) {
  auto garbled = [&] {
    PSTAR_THROW(ConfigError, name, "='", text,
                "' is not a Slurm task count list (expected e.g. 2(x3),1); set "
                "SLURM_NTASKS_PER_NODE to the number of ranks on each host");
  };
  std::optional<int64_t> found;
  int64_t nodes = 0;
  size_t pos = 0;
  while (true) {  // the whole list is read, so a typo past the wanted entry is still reported
    size_t digits_end = pos;
    while (digits_end < text.size() && std::isdigit(static_cast<unsigned char>(text[digits_end])))
      ++digits_end;
    std::optional<int64_t> count = parse_int(std::string_view(text).substr(pos, digits_end - pos));
    if (!count) garbled();
    int64_t repeat = 1;
    pos = digits_end;
    if (pos < text.size() && text[pos] == '(') {
      size_t close = text.find(')', pos);
      if (close == std::string::npos || close < pos + 3 || text[pos + 1] != 'x') garbled();
      std::optional<int64_t> r =
          parse_int(std::string_view(text).substr(pos + 2, close - (pos + 2)));
      if (!r || *r < 1) garbled();
      repeat = *r;
      pos = close + 1;
    }
    if (!found && (!node ? nodes == 0 : *node >= nodes && *node < nodes + repeat)) found = count;
    nodes += repeat;
    if (pos == text.size()) break;
    if (text[pos] != ',') garbled();
    ++pos;
  }
  PSTAR_CHECK(found, ConfigError, "SLURM_NODEID=", *node, " is not one of the ", nodes,
              " nodes of ", name, "=", text,
              "; set SLURM_NTASKS_PER_NODE to the number of ranks on this host");
  return {*found, str_cat(name, "=", text, node ? str_cat(" for SLURM_NODEID=", *node) : "")};
}

// Checks the four numbers against each other, then reads the master's address and port.
WorldInfo make_world(const EnvReader& env, const Sourced& rank, const Sourced& world,
                     const Sourced& local_rank, const Sourced& local_world,
                     const std::string& default_addr, const std::string& launcher) {
  check_world(rank, world, local_rank, local_world);
  WorldInfo info;
  info.rank = rank.value;
  info.world_size = world.value;
  info.local_rank = local_rank.value;
  info.local_world_size = local_world.value;
  info.master_addr = read_addr(env, default_addr);
  info.port = read_port(env);
  info.launcher = launcher;
  return info;
}

WorldInfo from_torchrun(const EnvReader& env, const std::string& rank_text,
                        const std::string& world_text) {
  Sourced rank = read_int("RANK", rank_text);
  Sourced world = read_int("WORLD_SIZE", world_text, "1");
  Sourced local_rank = int_or(env, "LOCAL_RANK", rank, rank.source);
  Sourced local_world = int_or(env, "LOCAL_WORLD_SIZE", world, world.source, "1");
  return make_world(
      env, rank, world, local_rank, local_world, kDefaultAddr,
      env("PSTAR_LAUNCHER") == std::optional<std::string>("1") ? "pstar" : "torchrun");
}

WorldInfo from_slurm(const EnvReader& env, const std::string& rank_text,
                     const std::string& world_text) {
  Sourced rank = read_int("SLURM_PROCID", rank_text);
  Sourced world = read_int("SLURM_NTASKS", world_text, "1");
  Sourced local_rank = int_or(env, "SLURM_LOCALID", {0, ""}, "0");

  Sourced local_world{1,
                      "the 1 rank per host assumed when neither SLURM_NTASKS_PER_NODE nor "
                      "SLURM_TASKS_PER_NODE is set"};
  if (std::optional<std::string> text = env("SLURM_NTASKS_PER_NODE")) {
    local_world = read_int("SLURM_NTASKS_PER_NODE", *text, "1");
  } else if (std::optional<std::string> text = env("SLURM_TASKS_PER_NODE")) {
    // Layouts may differ per node ("2(x3),1"): this node's entry when Slurm says which node.
    std::optional<int64_t> node;
    if (std::optional<std::string> node_text = env("SLURM_NODEID"))
      node = read_int("SLURM_NODEID", *node_text).value;
    local_world = tasks_on_node("SLURM_TASKS_PER_NODE", *text, node);
  }
  std::string addr = kDefaultAddr;
  const char* list_name = "SLURM_JOB_NODELIST";
  std::optional<std::string> list = env(list_name);
  if (!list) {
    list_name = "SLURM_NODELIST";
    list = env(list_name);
  }
  if (list && !env("MASTER_ADDR")) {
    try {
      addr = first_slurm_host(*list);
    } catch (const ConfigError& e) {
      PSTAR_THROW(ConfigError, list_name, ": ", e.what());
    }
  }

  return make_world(env, rank, world, local_rank, local_world, addr, "slurm");
}

bool is_host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (!value) return std::nullopt;
  return std::string(value);
}

WorldInfo detect_world(const EnvReader& env) {
  // Explicit rank variables win over Slurm's, so torchrun or `pstar train --nproc` inside an
  // allocation describes the ranks it started, not the Slurm task it runs in.
  std::optional<std::string> rank = env("RANK");
  std::optional<std::string> world = env("WORLD_SIZE");
  if (rank && world) return from_torchrun(env, *rank, *world);

  std::optional<std::string> slurm_rank = env("SLURM_PROCID");
  std::optional<std::string> slurm_world = env("SLURM_NTASKS");
  if (slurm_rank && slurm_world) return from_slurm(env, *slurm_rank, *slurm_world);

  return WorldInfo{};
}

// A node list is comma-separated entries; an entry is host-name text and bracketed ranges,
// "rack[1-2]-node[01-04]". The first host takes each bracket's first number as written (zero
// padding is part of the name). The whole list is checked, so a typo anywhere is reported.
std::string first_slurm_host(const std::string& nodelist) {
  auto garbled = [&](size_t pos, const char* what) {
    PSTAR_THROW(ConfigError, "'", nodelist, "' is not a Slurm node list (", what, " at position ",
                pos, "; expected e.g. node[01-04],gpu1); set MASTER_ADDR to rank 0's host name");
  };
  PSTAR_CHECK(!nodelist.empty(), ConfigError,
              "the Slurm node list is empty; set MASTER_ADDR to rank 0's host name");
  auto read_number = [&](size_t& pos) {
    size_t start = pos;
    while (pos < nodelist.size() && std::isdigit(static_cast<unsigned char>(nodelist[pos]))) ++pos;
    if (pos == start) garbled(start, "a number expected");
    return nodelist.substr(start, pos - start);
  };

  std::string first;
  bool in_first = true;
  size_t pos = 0;
  while (true) {
    size_t entry_start = pos;
    while (pos < nodelist.size() && nodelist[pos] != ',') {
      char c = nodelist[pos];
      if (is_host_char(c)) {
        if (in_first) first += c;
        ++pos;
      } else if (c == '[') {
        ++pos;
        bool first_range = true;
        while (true) {
          std::string lo = read_number(pos);
          if (in_first && first_range) first += lo;
          first_range = false;
          if (pos < nodelist.size() && nodelist[pos] == '-') {
            ++pos;
            std::string hi = read_number(pos);
            if (parse_int(hi) < parse_int(lo)) garbled(pos - hi.size(), "a descending range");
          }
          if (pos < nodelist.size() && nodelist[pos] == ',') {
            ++pos;
            continue;
          }
          if (pos < nodelist.size() && nodelist[pos] == ']') {
            ++pos;
            break;
          }
          garbled(pos, "']' expected");
        }
      } else {
        garbled(pos, str_cat("unexpected '", c, "'").c_str());
      }
    }
    if (pos == entry_start) garbled(pos, "an empty entry");
    in_first = false;
    if (pos == nodelist.size()) break;
    ++pos;  // the ',' between entries
  }
  return first;
}

}  // namespace pstar::dist
