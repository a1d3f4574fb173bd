// What speculative host Adam (Note [speculative adam]) costs and gains: the same chunk-engine run
// of a GPT whose parameters outweigh its activations (hidden 512, 4 layers, 32 tokens a step by
// default: about 12.7M parameters, 200 MB of fp32 model data, a few MB of activations), under a
// device budget that leaves most chunks on the host, host Adam on the worker
// (engine.overlap_adam true), as
//   - "no clipping": gradient_clipping 0, where the update is known before the backward and
//     finished chunks start their Adam in it exactly (the baseline, and the bound: speculation
//     does the same work on a guess, so it cannot beat it);
//   - "clipping, waiting": gradient_clipping set, engine.speculative_adam false: host Adam waits
//     for the gradient norm;
//   - "clipping, speculating": the same clip, engine.speculative_adam true;
//   - "clipping, auto": the same clip, engine.speculative_adam "auto" (Note [speculation by cost]).
// The clip is given relative to the first run's median gradient norm (--clip-factor, 2 by default:
// few steps clip). Figures per run: the median step time over the steps after the warm-up and the
// first planned one, the best of --rounds rounds (the runs alternate their order round by round),
// and the ratios speculating / waiting / no clipping; the share of host Adam's seconds that ran in
// the backward (adam_early_s over adam_host_s); the chunks speculated, rolled back and cancelled.
// It checks that the speculating runs' losses and norms equal the waiting run's, bit for bit as
// printed (%.17g). And the Adam kernel's byte rate in place over redirected into a slot (the
// engine's bf16 chunk under param/grad reuse, 28 bytes a parameter either way: Note [streaming
// stores]), the median of adjacent pairs, whose goal is 1. On a 2-core machine the worker shares
// the cores with LibTorch's threads. Ends with one JSON line.
//
//   pstar-bench-speculation [--steps S] [--clip-factor F] [--rounds R] [--hidden H] [--layers L]
//                           [--seq T] [--numel N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/optim/host_adam.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pstar::bench::median;

struct Run {
  std::string name;
  double early_s = 0, host_s = 0, wait_s = 0, step_s = 0;
  int64_t speculated = 0, rolled_back = 0, cancelled = 0, clipped = 0, speculating_steps = 0;
  std::vector<double> losses, norms;
  double share() const { return host_s > 0 ? early_s / host_s : 0; }
};

// Sums over the steps after the warm-up iteration and the first planned step.
Run read_run(const std::string& name, const fs::path& metrics, double clip) {
  Run r;
  r.name = name;
  std::vector<double> steps;
  for (const std::string& line : pstar::bench::read_lines(metrics)) {
    const json m = json::parse(line);
    if (m.contains("record")) continue;  // the start-up record
    r.losses.push_back(m["loss"].get<double>());
    r.norms.push_back(m["grad_norm"].get<double>());
    if (m["step"].get<int64_t>() <= 2) continue;
    steps.push_back(m["step_time_s"].get<double>());
    r.early_s += m.value("adam_early_s", 0.0);
    r.host_s += m.value("adam_host_s", 0.0);
    r.wait_s += m.value("adam_wait_s", 0.0);
    const int64_t speculated = m.value("adam_speculated_chunks", int64_t{0});
    r.speculated += speculated;
    r.speculating_steps += speculated > 0 ? 1 : 0;
    r.rolled_back += m.value("adam_rolled_back_chunks", int64_t{0});
    r.cancelled += m.value("adam_cancelled_chunks", int64_t{0});
    r.clipped += clip > 0 && m["grad_norm"].get<double>() > clip ? 1 : 0;
  }
  r.step_s = median(steps);
  return r;
}

// Page-aligned, as the engine's payloads and slots are.
struct Aligned {
  explicit Aligned(size_t bytes)
      : data(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096), &std::free) {
    std::memset(data.get(), 0, bytes);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data.get());
  }
  std::unique_ptr<void, decltype(&std::free)> data;
};

struct KernelRatio {
  double in_place_over_redirected = 0;            // byte rates: the median of adjacent pairs
  double in_place_gbps = 0, redirected_gbps = 0;  // the best of each
  bool streams = false;
};

// The Adam kernel in place and redirected into a slot, alternating, on the engine's bf16 chunk
// under param/grad reuse (the gradient in the parameter array).
KernelRatio kernel_ratio(int64_t numel, int pairs) {
  using pstar::optim::AdamSpan;
  const auto n = static_cast<size_t>(numel);
  Aligned master(n * 4), m(n * 4), v(n * 4), param(n * 2);
  Aligned slot_master(n * 4), slot_m(n * 4), slot_v(n * 4), slot_param(n * 2);
  for (size_t i = 0; i < n; ++i) {
    master.as<float>()[i] = 0.01f * static_cast<float>(i % 97);
    param.as<uint16_t>()[i] = 0x3a83;  // bf16 1.0e-3: the gradient
  }
  AdamSpan in_place{master.as<float>(),
                    m.as<float>(),
                    v.as<float>(),
                    param.as<void>(),
                    pstar::optim::GradType::kBF16,
                    param.as<void>(),
                    pstar::optim::ParamOutType::kBF16,
                    numel};
  AdamSpan redirected = in_place;
  redirected.master_out = slot_master.as<float>();
  redirected.exp_avg_out = slot_m.as<float>();
  redirected.exp_avg_sq_out = slot_v.as<float>();
  redirected.param_out = slot_param.as<void>();
  pstar::optim::AdamHyper hyper;
  const auto seconds = [&](const AdamSpan& span) {
    ++hyper.step;
    const auto begin = std::chrono::steady_clock::now();
    pstar::optim::host_adam_step(hyper, 1.0f, span);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  };
  // Once each untimed: the slot's pages are touched before anything is timed.
  seconds(in_place);
  seconds(redirected);
  std::vector<double> ratios;
  double best_in = 1e30, best_out = 1e30;
  for (int i = 0; i < pairs; ++i) {
    const double t_in = seconds(in_place), t_out = seconds(redirected);
    best_in = std::min(best_in, t_in);
    best_out = std::min(best_out, t_out);
    ratios.push_back(t_out / t_in);  // the same bytes: the rates' ratio inverted
  }
  KernelRatio k;
  k.in_place_over_redirected = median(ratios);
  k.in_place_gbps = 28.0 * static_cast<double>(numel) / best_in / 1e9;
  k.redirected_gbps = 28.0 * static_cast<double>(numel) / best_out / 1e9;
  k.streams = pstar::optim::redirected_streams(redirected);
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 16, hidden = 512, layers = 4, seq = 32, numel = int64_t{1} << 24;
  int rounds = 2;
  double clip_factor = 2.0;
  pstar::bench::parse_options(
      argc, argv,
      "pstar-bench-speculation [--steps S] [--clip-factor F] [--rounds R] [--hidden H] "
      "[--layers L] [--seq T] [--numel N]",
      {{"--steps", [&](const std::string& v) { steps = std::stoll(v); }},
       {"--clip-factor", [&](const std::string& v) { clip_factor = std::stod(v); }},
       {"--rounds", [&](const std::string& v) { rounds = std::stoi(v); }},
       {"--hidden", [&](const std::string& v) { hidden = std::stoll(v); }},
       {"--layers", [&](const std::string& v) { layers = std::stoll(v); }},
       {"--seq", [&](const std::string& v) { seq = std::stoll(v); }},
       {"--numel", [&](const std::string& v) { numel = std::stoll(v); }}});
  const pstar::bench::TempCorpus corpus("speculation");
  const fs::path dir =
      fs::temp_directory_path() / ("pstar-bench-speculation-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto train = [&](const std::string& name, double clip, const json& speculative) -> Run {
    json engine = {{"mode", "chunked"}, {"device_memory", "40MB"}, {"overlap_adam", true}};
    if (!speculative.is_null()) engine["speculative_adam"] = speculative;
    const json config = {
        {"model",
         {{"hidden", hidden},
          {"layers", layers},
          {"heads", 8},
          {"vocab_size", 256},
          {"seq_len", seq}}},
        {"data", {{"text", corpus.path.string()}}},
        {"train_micro_batch_size_per_gpu", 1},
        {"default_chunk_size", 1 << 20},
        {"bf16", {{"enabled", false}}},
        {"gradient_clipping", clip},
        {"training", {{"steps", steps}}},
        {"engine", engine},
    };
    const fs::path config_path = dir / "config.json", metrics = dir / "metrics.jsonl";
    std::ofstream(config_path) << config.dump(2);
    fs::remove(metrics);
    const int code =
        pstar::bench::run_program({PSTAR_BINARY, "train", config_path.string(), "--device", "cpu",
                                   "--quiet", "--metrics", metrics.string()});
    if (code != 0) {
      std::cerr << "pstar train (" << name << ") failed with exit code " << code << "\n";
      std::exit(1);
    }
    return read_run(name, metrics, clip);
  };
  // The clip from an unclipped run's norms, then every run `rounds` times, in turn.
  Run base = train("no clipping", 0.0, json(false));
  const double clip = clip_factor * median(base.norms);
  std::vector<Run> runs = {base, Run{}, Run{}, Run{}};
  const std::vector<std::pair<const char*, json>> cases = {{"no clipping", json(false)},
                                                           {"clipping, waiting", json(false)},
                                                           {"clipping, speculating", json(true)},
                                                           {"clipping, auto", json("auto")}};
  for (int round = 0; round < rounds; ++round) {
    for (size_t j = 0; j < cases.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(round)) % cases.size();
      if (round == 0 && i == 0) continue;  // measured above
      const Run r = train(cases[i].first, i == 0 ? 0.0 : clip, cases[i].second);
      if (runs[i].name.empty() || r.step_s < runs[i].step_s) runs[i] = r;
    }
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  const Run &none = runs[0], &waiting = runs[1], &speculating = runs[2], &automatic = runs[3];
  const KernelRatio kernel = kernel_ratio(numel, 9);

  bool same = true;
  for (const Run* r : {&speculating, &automatic})
    same = same && r->losses == waiting.losses && r->norms == waiting.norms;
  std::printf(
      "GPT %lldx%lld, seq %lld, fp32, %lld steps, %d round(s), clip %.4g (%.2f x the unclipped "
      "median norm), host Adam %s\n",
      static_cast<long long>(hidden), static_cast<long long>(layers), static_cast<long long>(seq),
      static_cast<long long>(steps), rounds, clip, clip_factor, pstar::optim::host_adam_isa());
  for (const Run* r : {&none, &waiting, &speculating, &automatic})
    std::printf(
        "  %-22s step %.1f ms; host Adam %.3f s, in the backward %.3f s: share %5.1f%%; waited "
        "%.3f s; speculated %lld (in %lld steps), rolled back %lld, cancelled %lld chunks; %lld "
        "steady steps clipped\n",
        r->name.c_str(), 1e3 * r->step_s, r->host_s, r->early_s, 100 * r->share(), r->wait_s,
        static_cast<long long>(r->speculated), static_cast<long long>(r->speculating_steps),
        static_cast<long long>(r->rolled_back), static_cast<long long>(r->cancelled),
        static_cast<long long>(r->clipped));
  const auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const double spec_over_wait = ratio(speculating.step_s, waiting.step_s);
  const double wait_over_none = ratio(waiting.step_s, none.step_s);
  const double spec_over_none = ratio(speculating.step_s, none.step_s);
  const double auto_over_wait = ratio(automatic.step_s, waiting.step_s);
  std::printf(
      "step time: speculating / waiting x%.3f (goal <= 1), waiting / no clipping x%.3f, "
      "speculating / no clipping x%.3f (the bound: >= 1 up to noise), auto / waiting x%.3f\n",
      spec_over_wait, wait_over_none, spec_over_none, auto_over_wait);
  std::printf(
      "Adam kernel, %lld parameters: in place / redirected byte rate x%.3f (median of 9 pairs; "
      "goal 1: the same 28 bytes a parameter), %.1f and %.1f GB/s best; the redirected span %s\n",
      static_cast<long long>(numel), kernel.in_place_over_redirected, kernel.in_place_gbps,
      kernel.redirected_gbps,
      kernel.streams ? "streams" : "does NOT stream (PSTAR_ADAM_STREAMING=0?)");
  std::printf("losses and norms of the speculating runs %s the waiting run's\n",
              same ? "equal" : "DIFFER FROM");
  json out = {{"bench", "speculation"},
              {"steps", steps},
              {"rounds", rounds},
              {"clip", clip},
              {"isa", pstar::optim::host_adam_isa()},
              {"speculating_over_waiting", spec_over_wait},
              {"waiting_over_no_clipping", wait_over_none},
              {"speculating_over_no_clipping", spec_over_none},
              {"auto_over_waiting", auto_over_wait},
              {"kernel_in_place_over_redirected", kernel.in_place_over_redirected},
              {"kernel_in_place_gb_per_s", kernel.in_place_gbps},
              {"kernel_redirected_gb_per_s", kernel.redirected_gbps},
              {"kernel_streams", kernel.streams},
              {"same_losses", same}};
  for (const Run* r : {&none, &waiting, &speculating, &automatic})
    out["runs"].push_back({{"name", r->name},
                           {"step_s", r->step_s},
                           {"host_s", r->host_s},
                           {"early_s", r->early_s},
                           {"share", r->share()},
                           {"wait_s", r->wait_s},
                           {"speculated", r->speculated},
                           {"speculating_steps", r->speculating_steps},
                           {"rolled_back", r->rolled_back},
                           {"cancelled", r->cancelled},
                           {"clipped", r->clipped}});
  std::cout << out.dump() << std::endl;
  return same ? 0 : 1;
}
