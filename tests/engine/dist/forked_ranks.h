// Several real ranks in one test: rank 0 in the test's process, the others forked, joined over
// Gloo on a free loopback port (dist::Communicator). A child reports a failed check through its
// exit status and a line on stderr.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/dist/communicator.h"

namespace pstar::testing {

// A loopback port nothing listens on (free a moment ago).
inline int free_port() {
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

// Runs body(comm) on `n` ranks of one host; body returns whether its checks held.
inline void run_ranks(int n, const std::function<bool(dist::Communicator&)>& body,
                      std::chrono::seconds timeout = std::chrono::seconds(30)) {
  const int port = free_port();
  auto world_of = [&](int r) {
    dist::WorldInfo w;
    w.rank = r;
    w.world_size = n;
    w.local_rank = r;
    w.local_world_size = n;
    w.port = port;
    w.launcher = "test";
    return w;
  };
  std::vector<pid_t> children;
  std::fflush(nullptr);
  for (int r = 1; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      bool ok = false;
      try {
        const auto comm = dist::connect_gloo(world_of(r), timeout);
        ok = body(*comm);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  try {
    const auto comm = dist::connect_gloo(world_of(0), timeout);
    EXPECT_TRUE(body(*comm)) << "rank 0";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
  }
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    waitpid(children[i], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << i + 1 << " failed (its stderr says)";
  }
}

}  // namespace pstar::testing
