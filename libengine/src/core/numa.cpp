#include "pstar/core/numa.h"

#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"

namespace pstar::core {
namespace fs = std::filesystem;

namespace {

// The first line of a small sysfs file, or nullopt-like empty with ok false.
bool read_line(const fs::path& path, std::string* line) {
  std::ifstream in(path);
  if (!in) return false;
  std::getline(in, *line);
  return true;
}

int parse_int(const std::string& text, const std::string& where) {
  PSTAR_CHECK(!text.empty() && text.size() <= 9 &&
                  std::all_of(text.begin(), text.end(),
                              [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }),
              FormatError, where, ": expected a CPU number, found '", text, "'");
  return std::stoi(text);
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text, const std::string& where) {
  std::vector<int> cpus;
  std::string trimmed = text;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back())))
    trimmed.pop_back();
  if (trimmed.empty()) return cpus;
  std::stringstream items(trimmed);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t dash = item.find('-');
    const int first = parse_int(item.substr(0, dash), where);
    const int last = dash == std::string::npos ? first : parse_int(item.substr(dash + 1), where);
    PSTAR_CHECK(first <= last, FormatError, where, ": the range '", item, "' runs backwards");
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<NumaNode> read_numa_nodes(const std::string& sysfs) {
  std::vector<NumaNode> nodes;
  const fs::path dir = fs::path(sysfs) / "devices/system/node";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return nodes;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 ||
        !std::all_of(name.begin() + 4, name.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      continue;
    std::string list;
    if (!read_line(entry.path() / "cpulist", &list)) continue;
    NumaNode node;
    node.id = std::stoi(name.substr(4));
    node.cpus = parse_cpu_list(list, (entry.path() / "cpulist").string());
    if (!node.cpus.empty()) nodes.push_back(std::move(node));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return nodes;
}

int read_pci_numa_node(const std::string& sysfs, const std::string& bus_id) {
  std::string id = bus_id;
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // CUDA reports an 8-digit domain ("00000000:3B:00.0"); sysfs names it with 4.
  const size_t colon = id.find(':');
  if (colon != std::string::npos && colon > 4) id = id.substr(colon - 4);
  std::string text;
  if (id.empty() || !read_line(fs::path(sysfs) / "bus/pci/devices" / id / "numa_node", &text))
    return -1;
  try {
    const int node = std::stoi(text);
    return node >= 0 ? node : -1;  // -1: the firmware does not say
  } catch (const std::exception&) {
    return -1;
  }
}

NumaChoice choose_numa_node(const std::vector<NumaNode>& nodes, bool gpu, int device_node,
                            int64_t local_rank, int64_t local_world_size) {
  NumaChoice choice;
  if (nodes.size() < 2) {
    choice.reason =
        nodes.empty() ? "the system describes no NUMA nodes" : "the machine has one NUMA node";
    return choice;
  }
  const auto count = static_cast<int64_t>(nodes.size());
  if (gpu) {
    for (const NumaNode& node : nodes)
      if (node.id == device_node) choice.node = &node;
    choice.reason = choice.node != nullptr ? str_cat("its GPU's node, of ", count)
                                           : str_cat("the system does not say which of its ", count,
                                                     " NUMA nodes its GPU is on");
    return choice;
  }
  const int64_t ranks = std::max<int64_t>(1, local_world_size);
  choice.node =
      &nodes[static_cast<size_t>(std::clamp<int64_t>(local_rank, 0, ranks - 1) * count / ranks)];
  choice.reason =
      str_cat("local rank ", local_rank, " of ", ranks, " spread over ", count, " NUMA nodes");
  return choice;
}

std::string bind_to_numa_node(const NumaNode& node) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : node.cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    return str_cat("sched_setaffinity: ", std::strerror(errno));
  // A node mask of one node; glibc has no wrapper without libnuma.
  constexpr size_t kBits = 8 * sizeof(unsigned long);
  std::vector<unsigned long> mask(static_cast<size_t>(node.id) / kBits + 1, 0);
  mask[static_cast<size_t>(node.id) / kBits] |= 1UL << (static_cast<size_t>(node.id) % kBits);
  if (syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask.data(), mask.size() * kBits + 1) != 0)
    return str_cat("set_mempolicy: ", std::strerror(errno));
  return {};
}

}  // namespace pstar::core
