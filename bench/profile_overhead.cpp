// What recording a profile costs: the same chunk-engine run of gpt-mini under a tight device
// budget (chunks move every step), without and with `--profile`, alternated to even out machine
// noise (which of the two runs first alternates too). Each run's figure is the median of its
// steady-state step times, so that a step slowed down by another process does not count; the
// headline is the best (fastest) run of each kind, as STREAM reports, with the median over the
// rounds of the two runs' ratio beside it. Also reports each kind's minor page faults (the
// median over its runs; from wait4) and the profile's size. Ends with one JSON line.
//
//   pstar-bench-profile [--steps S] [--rounds R]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::bench::median;

// The median step time after the warm-up iteration and the first planned step.
double steady_step_s(const fs::path& metrics) {
  std::vector<double> seconds;
  for (const std::string& line : pstar::bench::read_lines(metrics)) {
    const json m = json::parse(line);
    if (m.contains("record")) continue;  // the start-up record: not a step
    if (m["step"].get<int64_t>() <= 2) continue;
    seconds.push_back(m["step_time_s"].get<double>());
  }
  return median(seconds);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 12, rounds = 3;
  pstar::bench::parse_options(
      argc, argv, "pstar-bench-profile [--steps S] [--rounds R]",
      {{"--steps", [&](const std::string& v) { steps = std::stoll(v); }},
       {"--rounds", [&](const std::string& v) { rounds = std::stoll(v); }}});
  const pstar::bench::TempCorpus corpus("profile");
  const fs::path dir =
      fs::temp_directory_path() / ("pstar-bench-profile-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const json config = {
      {"model", {{"preset", "gpt-mini"}}},
      {"data", {{"text", corpus.path.string()}}},
      {"train_micro_batch_size_per_gpu", 4},
      {"bf16", {{"enabled", false}}},
      {"training", {{"steps", steps}}},
      {"engine", {{"mode", "chunked"}, {"device_memory", "64MB"}}},
  };
  const fs::path config_path = dir / "config.json";
  std::ofstream(config_path) << config.dump(2);

  std::vector<double> plain, profiled, plain_faults, profiled_faults;
  int64_t profile_bytes = 0;
  for (int64_t round = 0; round < rounds; ++round) {
    for (const bool profile : {round % 2 == 1, round % 2 == 0}) {
      const fs::path metrics = dir / "metrics.jsonl", h5 = dir / "run.h5";
      std::vector<std::string> args{PSTAR_BINARY, "train",         config_path.string(),
                                    "--device",   "cpu",           "--quiet",
                                    "--metrics",  metrics.string()};
      if (profile) args.insert(args.end(), {"--profile", h5.string()});
      struct rusage usage {};
      const int code = pstar::bench::run_program(args, &usage);
      if (code != 0) {
        std::cerr << "pstar train" << (profile ? " --profile" : "") << " failed with exit code "
                  << code << "\n";
        return 1;
      }
      (profile ? profiled : plain).push_back(steady_step_s(metrics));
      (profile ? profiled_faults : plain_faults).push_back(static_cast<double>(usage.ru_minflt));
      if (profile) profile_bytes = static_cast<int64_t>(fs::file_size(h5));
    }
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  // The best of the rounds: noise only ever adds time.
  const double base = *std::min_element(plain.begin(), plain.end());
  const double with = *std::min_element(profiled.begin(), profiled.end());
  std::vector<double> ratios;
  for (size_t r = 0; r < plain.size(); ++r) ratios.push_back(profiled[r] / plain[r]);
  const double median_ratio = median(ratios);
  std::printf(
      "step time without profile %.1f ms, with %.1f ms: x%.3f (%+.1f%%; median of the %zu rounds' "
      "ratios x%.3f); minor page faults %.0f without, %.0f with (median run); profile %.1f KiB "
      "for %lld steps\n",
      1e3 * base, 1e3 * with, with / base, 100 * (with / base - 1), ratios.size(), median_ratio,
      median(plain_faults), median(profiled_faults), static_cast<double>(profile_bytes) / 1024,
      static_cast<long long>(steps));
  std::cout << json{{"bench", "profile_overhead"},
                    {"steps", steps},
                    {"rounds", rounds},
                    {"step_s", base},
                    {"step_s_profiled", with},
                    {"overhead_ratio", with / base},
                    {"median_overhead_ratio", median_ratio},
                    {"minor_faults", median(plain_faults)},
                    {"minor_faults_profiled", median(profiled_faults)},
                    {"profile_bytes", profile_bytes}}
                   .dump()
            << std::endl;
  return 0;
}
