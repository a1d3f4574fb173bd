// data.jsonl on two real ranks (processes over Gloo): rank 0 makes the record cache and the other
// reads it (Note [token cache on several ranks]); when rank 0 cannot, the other stops with a
// DistError pointing at it instead of waiting or making its own.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "pstar/base/error.h"
#include "pstar/data/record_sampler.h"
#include "pstar/data/record_source.h"
#include "pstar/dist/communicator.h"
#include "pstar/formats/config.h"
#include "test_util.h"
#include "text/record_fixtures.h"

namespace pstar::data {
namespace {

namespace fs = std::filesystem;
using pstar::testing::write_text;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// body(comm) on two ranks: rank 0 here, rank 1 forked; a failed check in the child is reported
// through its exit status and a line on stderr.
void run_two_ranks(const std::function<bool(dist::Communicator&)>& body) {
  const int port = free_port();
  auto world_of = [&](int r) {
    dist::WorldInfo w;
    w.rank = r;
    w.world_size = 2;
    w.local_rank = r;
    w.local_world_size = 2;
    w.port = port;
    w.launcher = "test";
    return w;
  };
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    bool ok = false;
    try {
      dist::Communicator comm(world_of(1), std::chrono::seconds(30));
      ok = body(comm);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank 1: %s\n", e.what());
    }
    _exit(ok ? 0 : 1);
  }
  try {
    dist::Communicator comm(world_of(0), std::chrono::seconds(30));
    EXPECT_TRUE(body(comm)) << "rank 0";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank 1";
}

config::DataConfig data_in(const pstar::testing::ScratchDir& dir, const std::string& lines) {
  fs::create_directories(dir.path() / "tok");
  write_text(dir.file("tok/tokenizer.json"), text::testing::small_tokenizer_json());
  write_text(dir.file("tok/tokenizer_config.json"), text::testing::small_tokenizer_config());
  write_text(dir.file("chat.jsonl"), lines);
  config::DataConfig data;
  data.jsonl = dir.file("chat.jsonl");
  data.tokenizer = dir.file("tok");
  return data;
}

int records_files(const pstar::testing::ScratchDir& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir.path()))
    n += e.path().extension() == ".records" ? 1 : 0;
  return n;
}

const std::string kLine = R"({"messages": [{"role": "user", "content": "Hello"},)"
                          R"( {"role": "assistant", "content": "Paris is the capital"}]})";

TEST(RecordRanksTest, RankZeroMakesTheCacheAndTheOtherReadsIt) {
  pstar::testing::ScratchDir dir;
  const config::DataConfig data = data_in(dir, kLine + "\n" + kLine + "\n" + kLine + "\n");
  run_two_ranks([&](dist::Communicator& comm) {
    const RecordSources sources = open_record_sources(data, 400, 32, &comm);
    // Both ranks see the same records, from the one file rank 0 wrote.
    RecordSampler sampler(*sources.train, Sampling::kRandom, true, 1, 32, 1, 3, comm.rank(), 2);
    const double total =
        comm.all_reduce_sum(static_cast<double>(sampler.global_counted_targets(1)));
    return sources.train->records() == 3 && records_files(dir) == 1 &&
           total == 2.0 * static_cast<double>(sampler.global_counted_targets(1));
  });
}

TEST(RecordRanksTest, WhenRankZeroFailsTheOtherSaysSo) {
  pstar::testing::ScratchDir dir;
  const config::DataConfig data = data_in(dir, kLine + "\n{not json\n");
  run_two_ranks([&](dist::Communicator& comm) {
    try {
      (void)open_record_sources(data, 400, 32, &comm);
    } catch (const FormatError& e) {
      return comm.rank() == 0 &&
             std::string(e.what()).find("line 2: not JSON") != std::string::npos;
    } catch (const DistError& e) {
      return comm.rank() == 1 &&
             std::string(e.what()).find("data.jsonl " + data.jsonl +
                                        ": rank 0 could not make its record cache") !=
                 std::string::npos;
    }
    return false;
  });
  EXPECT_EQ(records_files(dir), 0);
}

}  // namespace
}  // namespace pstar::data
