// What the multi-rank `pstar train` tests share (train_dist_test.cpp,
// train_dist_failures_test.cpp): a fixture that writes configs and runs `pstar train` on several
// ranks, free ports, and the chunk plan a log states.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "metrics_util.h"
#include "test_util.h"
#include "text/record_fixtures.h"

namespace pstar::cmd::dist_testing {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

// A listening socket on a free loopback port, closed on destruction.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(fd_, 1) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      ADD_FAILURE() << "cannot open a loopback socket";
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() {
    if (fd_ >= 0) close(fd_);
  }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A port nothing listens on (free a moment ago).
inline int free_port() {
  Listener l;
  return l.port();
}

class DistTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "conf");
    write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
  }

  // gpt-tiny in fp32 on the chunk engine: 20000-element chunks give 7 chunks, so 4 ranks own
  // two groups' worth between them. The device budget is tight: chunks must move every step.
  static json config(int64_t micro_batch, int64_t steps) {
    return {
        {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
        {"data", {{"text", "corpus.txt"}}},
        {"train_micro_batch_size_per_gpu", micro_batch},
        {"default_chunk_size", 20000},
        {"bf16", {{"enabled", false}}},
        {"training", {{"steps", steps}, {"log_interval", 1}}},
        {"engine",
         {{"mode", "chunked"},
          {"chunk_size_search", false},
          {"device_memory", "3MB"},
          {"host_memory", "1GB"}}},
    };
  }

  std::string write_config(const json& c, const std::string& name = "train.json") {
    write_text(dir_.file("conf/" + name), c.dump(2));
    return "conf/" + name;
  }

  RunResult train(const std::string& config_path, const std::vector<std::string>& extra) {
    return train_on_cpu(config_path, extra, dir_.path());
  }

  // One rank started by hand with torchrun's variables.
  // One rank started by hand with torchrun's variables, on `device` with `env` added.
  Spawned spawn_rank(const std::string& config_path, int rank, int world, int port,
                     const std::vector<std::string>& extra = {}, const std::string& device = "cpu",
                     std::vector<std::string> env = {}) {
    std::vector<std::string> args{"train", config_path,      "--device",
                                  device,  "--dist-timeout", device == "cpu" ? "30" : "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    for (const std::string& v :
         {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
          "LOCAL_RANK=" + std::to_string(rank), "LOCAL_WORLD_SIZE=" + std::to_string(world),
          std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port)})
      env.push_back(v);
    return spawn_pstar(args, dir_.path(), env);
  }

  // Once rank 1 has trained two steps (its metrics file `rank1_metrics` says so), SIGKILLs it and
  // expects rank 0 to stop with a distributed error naming itself within 60 s; returns the seconds
  // it took.
  // `within`: the seconds the survivor may take (its --dist-timeout, and what its backend adds).
  double kill_rank1_and_expect_rank0_to_stop(Spawned& r0, Spawned& r1,
                                             const std::string& rank1_metrics, double within = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (read_metrics(dir_.file(rank1_metrics)).size() < 2 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_GE(read_metrics(dir_.file(rank1_metrics)).size(), 2u) << "rank 1 never trained";
    EXPECT_EQ(kill(r1.pid, SIGKILL), 0);
    const auto killed_at = std::chrono::steady_clock::now();
    EXPECT_EQ(wait_pstar(r1, 10).exit_code, 128 + SIGKILL);
    const RunResult survivor = wait_pstar(r0, static_cast<int>(within));
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    EXPECT_LT(took, within);
    EXPECT_EQ(survivor.exit_code, 6) << survivor;  // DistError
    EXPECT_TRUE(contains(survivor.err, "distributed error")) << survivor;
    EXPECT_TRUE(contains(survivor.err, "rank 0 of 2")) << survivor;
    return took;
  }

  ScratchDir dir_;
};

// Expects every step's loss of `got` within `bound` (relative) of `want`'s; returns the largest
// relative difference, for the log.
inline double expect_losses_track(const std::vector<json>& got, const std::vector<json>& want,
                                  double bound) {
  EXPECT_EQ(got.size(), want.size());
  double largest = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double one = want[i]["loss"].get<double>();
    const double other = got[i]["loss"].get<double>();
    EXPECT_NEAR(other, one, bound * std::abs(one)) << "step " << i + 1;
    largest = std::max(largest, std::abs(other - one) / std::abs(one));
  }
  return largest;
}

struct ChunkPlan {
  int64_t chunks = 0, chunk_size = 0, bytes_per_param = 0;
};

inline ChunkPlan parse_chunk_plan(const std::string& log) {
  std::smatch m;
  ChunkPlan p;
  static const std::regex re(R"(chunk plan: (\d+) chunks of (\d+) elements, (\d+) bytes per)");
  if (std::regex_search(log, m, re)) {
    p.chunks = std::stoll(m[1]);
    p.chunk_size = std::stoll(m[2]);
    p.bytes_per_param = std::stoll(m[3]);
  } else {
    ADD_FAILURE() << "no chunk plan line in:\n" << log;
  }
  return p;
}

// DeepSpeed's train_batch_size is the global batch: micro-batch × accumulation × world size. On two
// ranks with micro-batch 2, 4 trains and 2 (one rank's product) is refused with the product named,

}  // namespace pstar::cmd::dist_testing
