// Which NUMA node a rank's host work belongs to, and binding the process to it.
//
// Note [numa binding]
// On a machine with several NUMA nodes, a GPU sits on one of them: its copies to and from host
// memory, and the host Adam that reads and writes the chunks, run fastest on that node's cores
// and memory. So at start-up, before its thread pools and payloads exist, each rank of a node
// binds its process to one node: CPU affinity (threads started afterwards inherit it) and a
// memory policy preferring the node (set_mempolicy MPOL_PREFERRED: pages come from it while it
// has room, from others after). A GPU rank takes its GPU's node (sysfs: the PCI device's
// numa_node); CPU ranks of a node spread over its nodes, local rank r on node r * nodes / ranks.
// With one node (or none that sysfs describes, or a GPU whose node sysfs does not know) nothing
// is bound, and the log says why. distributed.numa_bind false turns it off.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pstar::core {

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
};

// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}. FormatError naming `where` for anything else.
std::vector<int> parse_cpu_list(const std::string& text, const std::string& where);

// The nodes with CPUs under `sysfs` (normally "/sys": devices/system/node/node<N>/cpulist), by
// id; empty when it describes none.
std::vector<NumaNode> read_numa_nodes(const std::string& sysfs);

// The node of the PCI device `bus_id` ("0000:3b:00.0", any case) under `sysfs`
// (bus/pci/devices/<id>/numa_node), or -1 when sysfs does not say.
int read_pci_numa_node(const std::string& sysfs, const std::string& bus_id);

struct NumaChoice {
  const NumaNode* node = nullptr;  // null: bind nothing
  std::string reason;              // for the log, either way
};

// Note [numa binding]: `device_node` is the rank's GPU's node (-1 unknown), `gpu` whether the
// rank computes on a GPU; `local_rank` of `local_world_size` ranks on this machine.
NumaChoice choose_numa_node(const std::vector<NumaNode>& nodes, bool gpu, int device_node,
                            int64_t local_rank, int64_t local_world_size);

// Binds this process (its calling thread and every thread it starts afterwards) to `node`'s CPUs
// and prefers its memory. Returns why not ("sched_setaffinity: Invalid argument"), empty when
// bound: a container may forbid either, and training goes on unbound.
std::string bind_to_numa_node(const NumaNode& node);

}  // namespace pstar::core
