// Note [numa binding]: sysfs parsing against a made-up tree, the choice of node, and a real
// binding of this process to the node it runs on (undone afterwards).
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/core/numa.h"
#include "test_util.h"

namespace pstar::core {
namespace {

namespace fs = std::filesystem;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

TEST(NumaTest, CpuListsParseAndBadOnesNameTheFile) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n", "x"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5", "x"), (std::vector<int>{5}));
  EXPECT_TRUE(parse_cpu_list("\n", "x").empty());
  try {
    parse_cpu_list("0-a", "node1/cpulist");
    FAIL() << "accepted 0-a";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("node1/cpulist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_cpu_list("3-1", "x"), FormatError);
}

// A two-socket machine as sysfs shows it: nodes 0 and 1 with CPUs, node 2 memory only, a GPU on
// node 1 and a device whose firmware gives no node.
class NumaSysfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path nodes = dir_.path() / "devices/system/node";
    for (const auto& [name, cpus] : std::vector<std::pair<std::string, std::string>>{
             {"node0", "0-3,8-11"}, {"node1", "4-7,12-15"}, {"node2", ""}}) {
      fs::create_directories(nodes / name);
      write_text((nodes / name / "cpulist").string(), cpus + "\n");
    }
    write_text((nodes / "online").string(), "0-2\n");
    const fs::path pci = dir_.path() / "bus/pci/devices";
    fs::create_directories(pci / "0000:3b:00.0");
    write_text((pci / "0000:3b:00.0/numa_node").string(), "1\n");
    fs::create_directories(pci / "0000:5e:00.0");
    write_text((pci / "0000:5e:00.0/numa_node").string(), "-1\n");
  }
  ScratchDir dir_;
};

TEST_F(NumaSysfsTest, NodesWithCpusAndAGpusNodeAreRead) {
  const std::vector<NumaNode> nodes = read_numa_nodes(dir_.path().string());
  ASSERT_EQ(nodes.size(), 2u) << "node 2 has no CPUs";
  EXPECT_EQ(nodes[0].id, 0);
  EXPECT_EQ(nodes[1].cpus, (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
  // CUDA's form of the bus id: an 8-digit domain, upper case.
  EXPECT_EQ(read_pci_numa_node(dir_.path().string(), "00000000:3B:00.0"), 1);
  EXPECT_EQ(read_pci_numa_node(dir_.path().string(), "0000:3b:00.0"), 1);
  EXPECT_EQ(read_pci_numa_node(dir_.path().string(), "0000:5e:00.0"), -1);
  EXPECT_EQ(read_pci_numa_node(dir_.path().string(), "0000:99:00.0"), -1);
  EXPECT_TRUE(read_numa_nodes((dir_.path() / "absent").string()).empty());
}

TEST_F(NumaSysfsTest, GpuRanksTakeTheirGpusNodeAndCpuRanksSpread) {
  const std::vector<NumaNode> nodes = read_numa_nodes(dir_.path().string());
  NumaChoice gpu = choose_numa_node(nodes, true, 1, 0, 8);
  ASSERT_NE(gpu.node, nullptr);
  EXPECT_EQ(gpu.node->id, 1);
  gpu = choose_numa_node(nodes, true, -1, 0, 8);
  EXPECT_EQ(gpu.node, nullptr);
  EXPECT_NE(gpu.reason.find("does not say"), std::string::npos) << gpu.reason;
  for (int64_t r = 0; r < 4; ++r) {
    const NumaChoice cpu = choose_numa_node(nodes, false, -1, r, 4);
    ASSERT_NE(cpu.node, nullptr);
    EXPECT_EQ(cpu.node->id, r < 2 ? 0 : 1) << "local rank " << r;
  }
  const NumaChoice one = choose_numa_node({nodes[0]}, false, -1, 0, 1);
  EXPECT_EQ(one.node, nullptr);
  EXPECT_NE(one.reason.find("one NUMA node"), std::string::npos) << one.reason;
}

// The binding itself, on this machine's own first node: the CPU affinity becomes the node's CPUs
// and the memory policy prefers it. Both are restored afterwards.
TEST(NumaTest, BindingSetsTheAffinityAndTheMemoryPolicy) {
  const std::vector<NumaNode> nodes = read_numa_nodes("/sys");
  if (nodes.empty()) GTEST_SKIP() << "/sys/devices/system/node describes no NUMA node here";
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  const NumaNode& node = nodes[0];
  const std::string failure = bind_to_numa_node(node);
  if (!failure.empty()) GTEST_SKIP() << "this process may not bind itself here: " << failure;
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  for (int cpu : node.cpus) EXPECT_TRUE(CPU_ISSET(cpu, &after)) << "cpu " << cpu;
  EXPECT_EQ(CPU_COUNT(&after), static_cast<int>(node.cpus.size()));
  int mode = -1;
  unsigned long mask[16] = {0};
  ASSERT_EQ(syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(unsigned long), nullptr, 0), 0);
  EXPECT_EQ(mode, MPOL_PREFERRED);
  EXPECT_TRUE(mask[node.id / 64] & (1UL << (node.id % 64)));
  ASSERT_EQ(sched_setaffinity(0, sizeof(before), &before), 0);
  ASSERT_EQ(syscall(SYS_set_mempolicy, MPOL_DEFAULT, nullptr, 0), 0);
}

}  // namespace
}  // namespace pstar::core
