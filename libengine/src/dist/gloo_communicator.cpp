// The run's communicator: c10d's Gloo group, with chunk groups moved as rings of send/recv (Note
// [ring collectives] in pstar/dist/communicator.h).
#include "pstar/dist/communicator.h"

#include <algorithm>
#include <cstring>

// Debian's LibTorch is built with Gloo but its CMake config does not say so to users.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <torch/torch.h>

#include "c10d_shared.h"
#include "pstar/base/error.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/core/torch_compat.h"

namespace pstar::dist {
namespace {

using core::Clock;

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const WorldInfo& world, std::chrono::seconds timeout);

  const WorldInfo& world() const override { return state_.world; }
  void all_gather(const std::vector<void*>& parts, int64_t bytes) override;
  void reduce_scatter(int64_t numel, const std::function<void(int64_t, float*)>& add_local,
                      float* out) override;
  void all_reduce_sum(std::vector<double>& values) override;
  using Communicator::all_reduce_sum;
  void barrier() override;
  std::vector<std::string> exchange(const std::string& key, const std::string& mine) override;
  CommStats take_stats() override;
  const c10::intrusive_ptr<c10d::Store>& store() const { return state_.store; }

 private:
  struct State {
    WorldInfo world;
    std::chrono::seconds timeout;
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
    CommStats stats;
    int tag = 0;  // every rank issues the same sequence of point-to-point rounds
    std::vector<float> send_buffer, recv_buffer;  // reduce_scatter's partial sums, reused

    int next() const { return static_cast<int>((world.rank + 1) % world.world_size); }
    int prev() const {
      return static_cast<int>((world.rank + world.world_size - 1) % world.world_size);
    }

    [[noreturn]] void fail(const char* what, const std::exception& e) const {
      PSTAR_THROW(DistError, "rank ", world.rank, " of ", world.world_size, ": ", what,
                  " failed: ", c10d_what(e),
                  "; another rank has probably stopped (its own log says why), or the network "
                  "between the ranks failed");
    }

    // One ring round: send `send_bytes` at `send` to the next rank while receiving as many bytes
    // into `recv` from the previous one.
    void round(void* send, void* recv, int64_t bytes, const char* what) {
      auto as_bytes = [](void* p, int64_t n) {
        return torch::from_blob(p, {n}, torch::TensorOptions().dtype(torch::kUInt8));
      };
      std::vector<at::Tensor> out{as_bytes(send, bytes)}, in{as_bytes(recv, bytes)};
      const int t = tag++;
      try {
        auto r = group->recv(in, prev(), t);
        auto s = group->send(out, next(), t);
        s->wait(timeout);
        r->wait(timeout);
      } catch (const std::exception& e) {
        fail(what, e);
      }
      stats.bytes_sent += bytes;
    }
  };
  State state_;
};

GlooCommunicator::GlooCommunicator(const WorldInfo& world, std::chrono::seconds timeout) {
  State& s = state_;
  s.world = world;
  s.timeout = timeout;
  const std::string where = str_cat(world.master_addr, ":", world.port);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(world.port);
  options.isServer = world.rank == 0;
  options.numWorkers = static_cast<size_t>(world.world_size);
  options.waitWorkers = false;
  options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  try {
    s.store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, options);
  } catch (const std::exception& e) {
    const std::string message = c10d_what(e);
    if (world.rank == 0) {
      PSTAR_THROW(DistError, "rank 0 cannot host the rendezvous at ", where, ": ", message,
                  "; if the port is in use, choose another with MASTER_PORT or --master-port");
    }
    PSTAR_THROW(DistError, "rank ", world.rank, " cannot reach the master at ", where, " within ",
                timeout.count(), " s: ", message,
                "; check MASTER_ADDR/MASTER_PORT (or the first host of the Slurm node list), that "
                "rank 0 is running, and that the port is open between the hosts");
  }
  try {
    auto group_options = c10d::ProcessGroupGloo::Options::create(
        std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
      group_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (is_loopback(world.master_addr)) {
      group_options->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      group_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("pstar/gloo", s.store);
    s.group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        prefixed, static_cast<int>(world.rank), static_cast<int>(world.world_size), group_options);
  } catch (const std::exception& e) {
    PSTAR_THROW(DistError, "rank ", world.rank, " of ", world.world_size,
                ": the Gloo process group did not form within ", timeout.count(),
                " s (rendezvous at ", where, "): ", c10d_what(e),
                "; every rank must start with the same WORLD_SIZE, and GLOO_SOCKET_IFNAME may "
                "name the network interface to use between hosts");
  }
}

void GlooCommunicator::all_gather(const std::vector<void*>& parts, int64_t bytes) {
  State& s = state_;
  const int64_t n = s.world.world_size;
  PSTAR_INTERNAL_ASSERT(static_cast<int64_t>(parts.size()) == n);
  const auto begin = Clock::now();
  // Round i passes part (rank - i) on to the next rank (Note [ring collectives]).
  for (int64_t i = 0; i < n - 1; ++i) {
    const int64_t send = (s.world.rank - i + n) % n;
    const int64_t recv = (s.world.rank - i - 1 + 2 * n) % n;
    s.round(parts[send], parts[recv], bytes, "all-gather");
  }
  s.stats.seconds += core::seconds_since(begin);
}

void GlooCommunicator::reduce_scatter(int64_t numel,
                                      const std::function<void(int64_t, float*)>& add_local,
                                      float* out) {
  State& s = state_;
  const int64_t n = s.world.world_size;
  const auto begin = Clock::now();
  // Round i sends the partial sum of part (rank - i - 1), which has collected i + 1 ranks; after
  // N - 1 rounds the part received last is this rank's own, summed over all ranks.
  std::vector<float>& send = s.send_buffer;
  std::vector<float>& recv = s.recv_buffer;
  send.assign(static_cast<size_t>(numel), 0.0F);
  recv.resize(static_cast<size_t>(numel));
  add_local((s.world.rank - 1 + n) % n, send.data());
  for (int64_t i = 0; i < n - 1; ++i) {
    const int64_t part = (s.world.rank - i - 2 + 2 * n) % n;
    s.round(send.data(), recv.data(), numel * 4, "reduce-scatter");
    add_local(part, recv.data());
    std::swap(send, recv);
  }
  std::memcpy(out, send.data(), static_cast<size_t>(numel) * 4);
  s.stats.seconds += core::seconds_since(begin);
}

void GlooCommunicator::all_reduce_sum(std::vector<double>& values) {
  State& s = state_;
  const auto begin = Clock::now();
  std::vector<at::Tensor> t{
      torch::from_blob(values.data(), {static_cast<int64_t>(values.size())}, torch::kFloat64)};
  try {
    s.group->allreduce(t)->wait(s.timeout);
  } catch (const std::exception& e) {
    s.fail("all-reduce", e);
  }
  s.stats.bytes_sent += static_cast<int64_t>(values.size() * sizeof(double));
  s.stats.seconds += core::seconds_since(begin);
}

void GlooCommunicator::barrier() {
  State& s = state_;
  try {
    s.group->barrier()->wait(s.timeout);
  } catch (const std::exception& e) {
    s.fail("barrier", e);
  }
}

std::vector<std::string> GlooCommunicator::exchange(const std::string& key,
                                                    const std::string& mine) {
  State& s = state_;
  std::vector<std::string> all;
  try {
    const std::string prefix = "pstar/exchange/" + key + "/";
    s.store->set(prefix + std::to_string(s.world.rank),
                 std::vector<uint8_t>(mine.begin(), mine.end()));
    for (int64_t r = 0; r < s.world.world_size; ++r) {
      const auto bytes = s.store->get(prefix + std::to_string(r));
      all.emplace_back(bytes.begin(), bytes.end());
    }
  } catch (const std::exception& e) {
    s.fail(str_cat("exchanging ", key, " through the store").c_str(), e);
  }
  return all;
}

CommStats GlooCommunicator::take_stats() {
  CommStats out = state_.stats;
  state_.stats = CommStats{};
  return out;
}

}  // namespace

c10::intrusive_ptr<c10d::Store> gloo_store(Communicator& comm) {
  auto* gloo = dynamic_cast<GlooCommunicator*>(&comm);
  return gloo != nullptr ? gloo->store() : c10::intrusive_ptr<c10d::Store>();
}

std::unique_ptr<Communicator> connect_gloo(const WorldInfo& world, std::chrono::seconds timeout) {
  return std::make_unique<GlooCommunicator>(world, timeout);
}

}  // namespace pstar::dist
