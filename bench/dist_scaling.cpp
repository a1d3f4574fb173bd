// Data-parallel scaling of the chunk engine on this machine: the same global batch trained by
// `pstar train --nproc N` for N = 1, 2, 4, each rank with its share of the cores. Reports tokens/s,
// the speed-up over N = 1 measured in the same run, and the fraction of a step rank 0 spends in
// collectives (Gloo over loopback). For N > 1 it trains twice, with the collectives beside compute
// (the default, Note [collectives beside compute]) and all on the main thread
// (PSTAR_OVERLAP_COMM=0), and reports the ratio and the share of a step compute waited for them.
// Ends with one JSON line.
//
//   pstar-bench-dist [--steps S] [--preset gpt-mini] [--global-batch 8] [--ranks 1,2,4]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int64_t ranks = 0;
  bool beside = true;  // collectives on the communication thread
  double tokens_per_s = 0;
  double comm_fraction = 0;
  double wait_fraction = 0;  // compute waiting for the communication thread
  double comm_mb_per_step = 0;
  double first_loss = 0, last_loss = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 12, global_batch = 8;
  std::string preset = "gpt-mini";
  std::vector<int64_t> world_sizes{1, 2, 4};
  pstar::bench::parse_options(
      argc, argv,
      "pstar-bench-dist [--steps S] [--preset gpt-mini] [--global-batch 8] [--ranks 1,2,4]",
      {{"--steps", [&](const std::string& v) { steps = std::stoll(v); }},
       {"--preset", [&](const std::string& v) { preset = v; }},
       {"--global-batch", [&](const std::string& v) { global_batch = std::stoll(v); }},
       {"--ranks", [&](const std::string& v) {
          world_sizes.clear();
          std::stringstream in(v);
          for (std::string n; std::getline(in, n, ',');) world_sizes.push_back(std::stoll(n));
        }}});
  constexpr int64_t kWarmup = 2;  // the warm-up iteration and the first planned one
  if (steps <= kWarmup) {
    std::cerr << "--steps must be more than " << kWarmup << "\n";
    return 2;
  }
  const pstar::bench::TempCorpus corpus("dist");
  const fs::path dir = fs::temp_directory_path() / ("pstar-bench-dist-" + std::to_string(getpid()));
  fs::create_directories(dir);

  std::vector<Result> results;
  // One run of `pstar train --nproc n`, with its collectives beside compute or not.
  const auto train = [&](int64_t n, bool beside, Result* r) {
    const json config = {
        {"model", {{"preset", preset}}},
        {"data", {{"text", corpus.path.string()}}},
        {"train_micro_batch_size_per_gpu", global_batch / n},
        {"bf16", {{"enabled", false}}},
        {"training", {{"steps", steps}}},
        {"engine", {{"mode", "chunked"}}},
    };
    const fs::path config_path = dir / ("config-" + std::to_string(n) + ".json");
    std::ofstream(config_path) << config.dump(2);
    const fs::path metrics = dir / ("metrics-" + std::to_string(n) + ".jsonl");
    setenv("PSTAR_OVERLAP_COMM", beside ? "1" : "0", 1);  // the ranks inherit it
    const int code = pstar::bench::run_program({PSTAR_BINARY, "train", config_path.string(),
                                                "--device", "cpu", "--quiet", "--nproc",
                                                std::to_string(n), "--metrics", metrics.string()});
    if (code != 0) {
      std::cerr << "pstar train --nproc " << n << " failed with exit code " << code << "\n";
      return false;
    }
    r->ranks = n;
    r->beside = beside;
    std::vector<json> lines;
    for (const std::string& line : pstar::bench::read_lines(metrics)) {
      json m = json::parse(line);
      if (!m.contains("record")) lines.push_back(std::move(m));  // steps, not the start-up record
    }
    r->first_loss = lines.front()["loss"].get<double>();
    r->last_loss = lines.back()["loss"].get<double>();
    double time = 0, comm = 0, wait = 0, bytes = 0;
    int64_t tokens = 0, counted = 0, before = 0;
    for (const json& m : lines) {
      // The tokens counter covers the global batch, whatever N is.
      const int64_t step_tokens = m["tokens"].get<int64_t>() - before;
      before = m["tokens"].get<int64_t>();
      if (m["step"].get<int64_t>() <= kWarmup) continue;
      time += m["step_time_s"].get<double>();
      tokens += step_tokens;
      if (m.contains("comm_s")) comm += m["comm_s"].get<double>();
      if (m.contains("comm_wait_s")) wait += m["comm_wait_s"].get<double>();
      if (m.contains("comm_bytes")) bytes += static_cast<double>(m["comm_bytes"].get<int64_t>());
      ++counted;
    }
    r->tokens_per_s = static_cast<double>(tokens) / time;
    r->comm_fraction = comm / time;
    // On the main thread every second in collectives is a second compute waits.
    r->wait_fraction = beside ? wait / time : r->comm_fraction;
    r->comm_mb_per_step = bytes / static_cast<double>(counted) / 1e6;
    return true;
  };
  for (int64_t n : world_sizes) {
    if (global_batch % n != 0) {
      std::cerr << "global batch " << global_batch << " is not divisible by " << n << " ranks\n";
      return 2;
    }
    for (const bool beside : {false, true}) {
      if (n == 1 && !beside) continue;  // one rank has no collectives
      Result r;
      if (!train(n, beside, &r)) return 1;
      results.push_back(r);
      std::printf(
          "N=%lld %-16s %8.0f tok/s  x%.2f vs N=1  comm %4.1f%% of a step, compute waited "
          "%4.1f%% (%.1f MB sent/step by rank 0)  loss %.4f -> %.4f\n",
          static_cast<long long>(n),
          n == 1   ? ""
          : beside ? "beside compute"
                   : "on main thread",
          r.tokens_per_s, r.tokens_per_s / results[0].tokens_per_s, 100 * r.comm_fraction,
          100 * r.wait_fraction, r.comm_mb_per_step, r.first_loss, r.last_loss);
    }
    if (n > 1) {
      const Result& main_thread = results[results.size() - 2];
      std::printf("N=%lld collectives beside compute: x%.2f tokens/s against the main thread\n",
                  static_cast<long long>(n),
                  results.back().tokens_per_s / main_thread.tokens_per_s);
    }
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);

  json line = {{"bench", "dist_scaling"},
               {"preset", preset},
               {"global_batch", global_batch},
               {"steps", steps}};
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const std::string n = std::to_string(r.ranks);
    if (!r.beside) {
      line["tokens_per_s_n" + n + "_main_thread"] = r.tokens_per_s;
      continue;
    }
    line["tokens_per_s_n" + n] = r.tokens_per_s;
    line["speedup_n" + n] = r.tokens_per_s / results[0].tokens_per_s;
    line["comm_fraction_n" + n] = r.comm_fraction;
    if (r.ranks > 1) {
      line["wait_fraction_n" + n] = r.wait_fraction;
      line["overlap_speedup_n" + n] = r.tokens_per_s / results[i - 1].tokens_per_s;
    }
  }
  std::cout << line.dump() << std::endl;
  return 0;
}
