// Reading the world from launcher environments (a map stands in for the process environment):
// each launcher, its defaults, the precedence between them, every rejected value, and Slurm's
// compressed node lists.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "pstar/base/error.h"
#include "pstar/dist/world.h"

namespace pstar::dist {
namespace {

using Env = std::map<std::string, std::string>;

EnvReader reader(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

WorldInfo detect(const Env& env) { return detect_world(reader(env)); }

// The ConfigError detect_world throws for `env`, or "" when it throws none.
std::string config_error(const Env& env) {
  try {
    detect(env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MESSAGE_HAS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << (message)

TEST(DetectWorldTest, NoLauncherIsAWorldOfOne) {
  WorldInfo w = detect({});
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_world_size, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.port, 29500);
  EXPECT_EQ(w.launcher, "none");
  EXPECT_FALSE(w.distributed());
}

TEST(DetectWorldTest, HalfATorchrunEnvironmentIsIgnored) {
  EXPECT_EQ(detect({{"RANK", "1"}}).launcher, "none");
  EXPECT_EQ(detect({{"WORLD_SIZE", "2"}}).launcher, "none");
  EXPECT_EQ(detect({{"SLURM_PROCID", "1"}}).launcher, "none");
  // Malformed values of variables that are not read do not matter.
  EXPECT_EQ(detect({{"RANK", "x"}, {"MASTER_PORT", "0"}}).launcher, "none");
}

TEST(DetectWorldTest, Torchrun) {
  WorldInfo w = detect({{"RANK", "5"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "node07"},
                        {"MASTER_PORT", "12345"}});
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "node07");
  EXPECT_EQ(w.port, 12345);
  EXPECT_EQ(w.launcher, "torchrun");
  EXPECT_TRUE(w.distributed());
}

TEST(DetectWorldTest, TorchrunDefaults) {
  WorldInfo w = detect({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.world_size, 3);
  EXPECT_EQ(w.local_rank, 2);        // LOCAL_RANK defaults to RANK
  EXPECT_EQ(w.local_world_size, 3);  // LOCAL_WORLD_SIZE defaults to WORLD_SIZE
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.port, 29500);
  EXPECT_EQ(w.launcher, "torchrun");
}

TEST(DetectWorldTest, WorldSizeOneUnderALauncherIsNotDistributed) {
  WorldInfo w = detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(w.launcher, "torchrun");
  EXPECT_FALSE(w.distributed());
}

TEST(DetectWorldTest, PstarLauncher) {
  Env env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PSTAR_LAUNCHER", "1"}};
  EXPECT_EQ(detect(env).launcher, "pstar");
  env["PSTAR_LAUNCHER"] = "0";
  EXPECT_EQ(detect(env).launcher, "torchrun");
  // Without RANK and WORLD_SIZE the flag alone starts nothing.
  EXPECT_EQ(detect({{"PSTAR_LAUNCHER", "1"}}).launcher, "none");
}

TEST(DetectWorldTest, Slurm) {
  WorldInfo w = detect({{"SLURM_PROCID", "6"},
                        {"SLURM_NTASKS", "8"},
                        {"SLURM_LOCALID", "2"},
                        {"SLURM_NTASKS_PER_NODE", "4"},
                        {"SLURM_TASKS_PER_NODE", "3(x2),2"},  // SLURM_NTASKS_PER_NODE wins
                        {"SLURM_JOB_NODELIST", "gpu[03-05,9],cpu1"},
                        {"SLURM_NODELIST", "other1"}});
  EXPECT_EQ(w.rank, 6);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "gpu03");
  EXPECT_EQ(w.port, 29500);
  EXPECT_EQ(w.launcher, "slurm");
}

TEST(DetectWorldTest, SlurmDefaults) {
  WorldInfo w = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_world_size, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.port, 29500);
  EXPECT_EQ(w.launcher, "slurm");
}

TEST(DetectWorldTest, SlurmTasksPerNode) {
  Env env = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "7"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"}};
  EXPECT_EQ(detect(env).local_world_size, 2);  // the first entry when the node is unknown
  env["SLURM_TASKS_PER_NODE"] = "4";
  EXPECT_EQ(detect(env).local_world_size, 4);
  env["SLURM_TASKS_PER_NODE"] = "3,1(x2),2";
  EXPECT_EQ(detect(env).local_world_size, 3);
}

TEST(DetectWorldTest, SlurmTasksPerNodeOfThisNode) {
  Env env = {{"SLURM_PROCID", "6"},
             {"SLURM_NTASKS", "7"},
             {"SLURM_TASKS_PER_NODE", "2(x3),1"},
             {"SLURM_NODEID", "3"}};
  EXPECT_EQ(detect(env).local_world_size, 1);
  env["SLURM_NODEID"] = "2";
  EXPECT_EQ(detect(env).local_world_size, 2);
  env["SLURM_NODEID"] = "4";
  EXPECT_MESSAGE_HAS(config_error(env), "SLURM_NODEID=4 is not one of the 4 nodes");
}

TEST(DetectWorldTest, SlurmNodelistFallbacks) {
  Env env = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "n[7-8]"}};
  EXPECT_EQ(detect(env).master_addr, "n7");
  env["MASTER_ADDR"] = "10.0.0.1";
  env["MASTER_PORT"] = "4000";
  EXPECT_EQ(detect(env).master_addr, "10.0.0.1");
  EXPECT_EQ(detect(env).port, 4000);
  // MASTER_ADDR makes the node list irrelevant, even a garbled one.
  env["SLURM_JOB_NODELIST"] = "n[7-";
  EXPECT_EQ(detect(env).master_addr, "10.0.0.1");
  env.erase("MASTER_ADDR");
  std::string message = config_error(env);
  EXPECT_MESSAGE_HAS(message, "SLURM_JOB_NODELIST");
  EXPECT_MESSAGE_HAS(message, "n[7-");
  EXPECT_MESSAGE_HAS(message, "set MASTER_ADDR");
}

TEST(DetectWorldTest, TorchrunWinsOverSlurm) {
  WorldInfo w = detect({{"RANK", "3"},
                        {"WORLD_SIZE", "4"},
                        {"PSTAR_LAUNCHER", "1"},
                        {"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "1"},
                        {"SLURM_JOB_NODELIST", "node1"}});
  EXPECT_EQ(w.launcher, "pstar");
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.master_addr, "127.0.0.1");  // the node list is Slurm's, not the launcher's
}

TEST(DetectWorldTest, MalformedIntegers) {
  const Env base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"}) {
    for (const char* value : {"", "x", "1x", " 1", "1.0", "+1", "99999999999999999999"}) {
      Env env = base;
      env[name] = value;
      std::string message = config_error(env);
      EXPECT_MESSAGE_HAS(message, std::string(name) + "='" + value + "' is not an integer");
      EXPECT_MESSAGE_HAS(message, "decimal whole number");
    }
  }
  const Env slurm = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}};
  for (const char* name :
       {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID"}) {
    Env env = slurm;
    env[name] = "two";
    if (std::string(name) == "SLURM_NODEID") env["SLURM_TASKS_PER_NODE"] = "2";
    EXPECT_MESSAGE_HAS(config_error(env), std::string(name) + "='two' is not an integer");
  }
}

TEST(DetectWorldTest, GarbledTasksPerNode) {
  for (const char* value : {"", "x", "2(x", "2(x)", "2(3)", "2(x0)", "2,", ",2", "2(x2)1", "2;1"}) {
    std::string message = config_error(
        {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", value}});
    EXPECT_MESSAGE_HAS(message, std::string("SLURM_TASKS_PER_NODE='") + value + "'");
    EXPECT_MESSAGE_HAS(message, "2(x3),1");
  }
}

TEST(DetectWorldTest, WorldSizeBelowOne) {
  std::string message = config_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_MESSAGE_HAS(message, "WORLD_SIZE=0");
  EXPECT_MESSAGE_HAS(message, "at least 1");
  EXPECT_MESSAGE_HAS(config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "-1"}}),
                     "SLURM_NTASKS=-1");
}

TEST(DetectWorldTest, RankOutsideTheWorld) {
  std::string message = config_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_MESSAGE_HAS(message, "RANK=4 is outside [0, 4)");
  EXPECT_MESSAGE_HAS(message, "WORLD_SIZE=4");
  EXPECT_MESSAGE_HAS(message, "0 to 3");
  EXPECT_MESSAGE_HAS(config_error({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}), "RANK=-1 is outside");
  EXPECT_MESSAGE_HAS(config_error({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}),
                     "SLURM_PROCID=2 is outside [0, 2)");
}

TEST(DetectWorldTest, LocalRankOutsideTheHost) {
  std::string message = config_error(
      {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_MESSAGE_HAS(message, "LOCAL_RANK=2 is outside [0, 2)");
  EXPECT_MESSAGE_HAS(message, "LOCAL_WORLD_SIZE=2");
  // A defaulted local rank says where its value came from.
  message = config_error({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_MESSAGE_HAS(message, "LOCAL_RANK (unset, so RANK=3) is outside [0, 2)");
  EXPECT_MESSAGE_HAS(config_error({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "-1"}}),
                     "LOCAL_RANK=-1 is outside");
  EXPECT_MESSAGE_HAS(config_error({{"SLURM_PROCID", "0"},
                                   {"SLURM_NTASKS", "4"},
                                   {"SLURM_LOCALID", "1"},
                                   {"SLURM_NTASKS_PER_NODE", "1"}}),
                     "SLURM_LOCALID=1 is outside [0, 1)");
  // Without a per-node count Slurm's local world is 1, so any other local id is inconsistent.
  EXPECT_MESSAGE_HAS(
      config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}}),
      "SLURM_LOCALID=1 is outside [0, 1)");
}

TEST(DetectWorldTest, LocalWorldSizeOutsideTheWorld) {
  EXPECT_MESSAGE_HAS(
      config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "0"}}),
      "LOCAL_WORLD_SIZE=0 is not a number of ranks on this host; it must be in 1..2");
  EXPECT_MESSAGE_HAS(config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}}),
                     "LOCAL_WORLD_SIZE=3");
  EXPECT_MESSAGE_HAS(
      config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "4"}}),
      "SLURM_TASKS_PER_NODE=4");
}

TEST(DetectWorldTest, PortOutsideTheRange) {
  for (const char* port : {"0", "-5", "65536", "100000"}) {
    std::string message = config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", port}});
    EXPECT_MESSAGE_HAS(message, std::string("MASTER_PORT=") + port + " is outside 1..65535");
    EXPECT_MESSAGE_HAS(message, "29500");
  }
  EXPECT_EQ(detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}).port, 1);
  EXPECT_EQ(detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65535"}}).port, 65535);
  EXPECT_MESSAGE_HAS(
      config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"MASTER_PORT", "70000"}}),
      "MASTER_PORT=70000 is outside 1..65535");
}

TEST(DetectWorldTest, EmptyMasterAddr) {
  EXPECT_MESSAGE_HAS(config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}}),
                     "MASTER_ADDR is set but empty");
}

TEST(FirstSlurmHostTest, CompressedForms) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node[01-04]"), "node01");
  EXPECT_EQ(first_slurm_host("gpu[03-05,9],cpu1"), "gpu03");
  EXPECT_EQ(first_slurm_host("a-b[7]"), "a-b7");
  EXPECT_EQ(first_slurm_host("node[007,1-3]"), "node007");
  EXPECT_EQ(first_slurm_host("cpu1,gpu[1-2]"), "cpu1");
  EXPECT_EQ(first_slurm_host("rack[2-3]-node[08-09]"), "rack2-node08");
  EXPECT_EQ(first_slurm_host("node[5-6]-ib"), "node5-ib");
  EXPECT_EQ(first_slurm_host("host.example.org"), "host.example.org");
  EXPECT_EQ(first_slurm_host("n_1[0]"), "n_10");
}

TEST(FirstSlurmHostTest, EmptyOrGarbledListsAreRejected) {
  EXPECT_THROW(first_slurm_host(""), ConfigError);
  for (const char* list : {"node[", "node[01-", "node[01-04", "node]", "node[]", "node[a-b]",
                           "node[1-]", "node[-1]", "node[4-2]", ",node1", "node1,", "node1,,n2",
                           "node 1", "node[1-2]x[", "gpu[1],cpu[2", "node(1)"}) {
    try {
      first_slurm_host(list);
      ADD_FAILURE() << "accepted '" << list << "'";
    } catch (const ConfigError& e) {
      std::string message = e.what();
      EXPECT_MESSAGE_HAS(message, std::string("'") + list + "' is not a Slurm node list");
      EXPECT_MESSAGE_HAS(message, "set MASTER_ADDR");
    }
  }
}

}  // namespace
}  // namespace pstar::dist
