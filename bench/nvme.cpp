// The NVMe store's read and write bandwidth against the disk's own, measured in the same run. The
// last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-nvme [--dir /tmp] [--slot-mib 64] [--slots 16]
//       [--queue-depth 8] [--backend auto|io_uring|threads] [--checksums] [--rounds 3]
//
// The bound is what a plain loop gets from the same file system: one file, opened with O_DIRECT,
// written and then read sequentially with pwrite/pread of one slot's size each (large requests
// that the kernel splits and queues to the device as it likes). The store moves the same bytes as
// --slots slot writes, all queued at once and then waited for, and the same number of slot reads,
// split into 1 MiB requests with --queue-depth in flight per direction. Both files are allocated
// before timing (fallocate), and every round rewrites the same extents, so neither side pays for
// allocation. Rounds alternate the two; the figures are each case's best round (the machine may be
// shared), with the median beside it. Target (issue 26): the store at 0.8 of the bound or more.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "pstar/nvme/aligned_buffer.h"
#include "pstar/nvme/store.h"
#include "raw_file.h"

namespace {

using Clock = std::chrono::steady_clock;
using pstar::bench::fs_name;
using pstar::bench::RawFile;
using pstar::nvme::AlignedBuffer;
using pstar::nvme::BackendKind;
using pstar::nvme::NvmeStore;

struct Samples {
  std::vector<double> gbps;
  double best() const { return *std::max_element(gbps.begin(), gbps.end()); }
  double median() const {
    std::vector<double> s = gbps;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
};

double seconds_of(const std::function<void()>& run) {
  const auto start = Clock::now();
  run();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"NVMe store bandwidth against the disk's sequential O_DIRECT bandwidth"};
  std::string dir = "/tmp", backend = "auto";
  int64_t slot_mib = 64, slots = 16;
  int queue_depth = 8, rounds = 3;
  bool checksums = false;
  app.add_option("--dir", dir, "a directory on the disk to measure");
  app.add_option("--slot-mib", slot_mib, "slot size, MiB");
  app.add_option("--slots", slots, "slots moved each way per round");
  app.add_option("--queue-depth", queue_depth, "requests in flight per direction");
  app.add_option("--backend", backend, "auto, io_uring or threads")
      ->check(CLI::IsMember({"auto", "io_uring", "threads"}));
  app.add_flag("--checksums", checksums, "CRC-32 per slot (computed on the caller's thread)");
  app.add_option("--rounds", rounds, "rounds (best and median reported)");
  CLI11_PARSE(app, argc, argv);
  try {
    pstar::log::set_level(pstar::log::Level::kWarn);
    const int64_t slot_bytes = slot_mib << 20;
    const int64_t total = slot_bytes * slots;
    std::vector<AlignedBuffer> bufs;
    std::mt19937_64 rng(1);
    for (int64_t s = 0; s < slots; ++s) {
      bufs.emplace_back(slot_bytes);
      auto* p = bufs.back().as<uint64_t>();
      for (int64_t i = 0; i < slot_bytes / 8; ++i) p[i] = rng();
    }
    pstar::nvme::StoreOptions options;
    options.queue_depth = queue_depth;
    options.checksums = checksums;
    options.backend = backend == "io_uring"  ? BackendKind::kIoUring
                      : backend == "threads" ? BackendKind::kThreads
                                             : BackendKind::kAuto;
    RawFile raw(dir, total);
    auto store =
        NvmeStore::open(dir, "bench-" + std::to_string(::getpid()), slot_bytes, slots, options);
    std::printf("%s (%s): %lld slots of %lld MiB each way per round; store: %s\n", dir.c_str(),
                fs_name(dir).c_str(), static_cast<long long>(slots),
                static_cast<long long>(slot_mib), store->backend_reason().c_str());

    Samples raw_write, raw_read, store_write, store_read;
    const double gb = static_cast<double>(total) / 1e9;
    for (int r = 0; r < rounds; ++r) {
      raw_write.gbps.push_back(gb / seconds_of([&] { raw.write_all(bufs); }));
      store_write.gbps.push_back(gb / seconds_of([&] {
                                   std::vector<pstar::nvme::Ticket> t;
                                   for (int64_t s = 0; s < slots; ++s)
                                     t.push_back(store->write(s, bufs[s].data(), slot_bytes));
                                   for (const auto& x : t) store->wait(x);
                                 }));
      raw_read.gbps.push_back(gb / seconds_of([&] { raw.read_all(bufs); }));
      store_read.gbps.push_back(gb / seconds_of([&] {
                                  std::vector<pstar::nvme::Ticket> t;
                                  for (int64_t s = 0; s < slots; ++s)
                                    t.push_back(store->read(s, bufs[s].data(), slot_bytes));
                                  for (const auto& x : t) store->wait(x);
                                }));
      std::printf(
          "round %d: write raw %.3f GB/s store %.3f GB/s; read raw %.3f GB/s store %.3f GB/s\n", r,
          raw_write.gbps.back(), store_write.gbps.back(), raw_read.gbps.back(),
          store_read.gbps.back());
    }
    const double write_ratio = store_write.best() / raw_write.best();
    const double read_ratio = store_read.best() / raw_read.best();
    std::printf("best: write %.3f of the raw O_DIRECT bandwidth, read %.3f (target >= 0.8)\n",
                write_ratio, read_ratio);
    nlohmann::json result = {{"bench", "nvme"},
                             {"dir", dir},
                             {"filesystem", fs_name(dir)},
                             {"backend", pstar::nvme::backend_name(store->backend())},
                             {"direct_io", store->direct_io()},
                             {"queue_depth", queue_depth},
                             {"request_bytes", options.request_bytes},
                             {"checksums", checksums},
                             {"slot_bytes", slot_bytes},
                             {"slots", slots},
                             {"rounds", rounds},
                             {"raw_write_gb_per_s", raw_write.best()},
                             {"raw_read_gb_per_s", raw_read.best()},
                             {"store_write_gb_per_s", store_write.best()},
                             {"store_read_gb_per_s", store_read.best()},
                             {"median_raw_write_gb_per_s", raw_write.median()},
                             {"median_raw_read_gb_per_s", raw_read.median()},
                             {"median_store_write_gb_per_s", store_write.median()},
                             {"median_store_read_gb_per_s", store_read.median()},
                             {"write_ratio", write_ratio},
                             {"read_ratio", read_ratio},
                             {"meets_target", write_ratio >= 0.8 && read_ratio >= 0.8}};
    std::printf("%s\n", result.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pstar-bench-nvme: %s\n", e.what());
    return 1;
  }
  return 0;
}
