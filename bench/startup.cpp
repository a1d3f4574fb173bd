// How long `pstar train` takes to get to step 1 (issue 35): a GPT of a given size built on the CPU
// by the chunk engine, from its random initialisation and from a Hugging Face folder this benchmark
// writes first (read from a warm page cache), each in a fresh process. From the run's start-up
// record (Note [set-up phases]) it prints every phase's time, the payload bytes set-up wrote per
// second, step 1's and step 2's times and the release of the engine's memory. With --baseline,
// another pstar binary (an earlier build) runs the same configs in the same rounds.
//
// The bound: the machine's parallel first-touch fill of the same payload bytes, one thread per
// core writing zeros over fresh anonymous memory in 1 MiB pieces (Note [parallel first touch] in
// pstar/core/parallel_fill.h), in 4 KiB pages and advised into huge pages (Note [huge pages for
// payloads]), the faster of the two. Set-up must bring every payload byte into memory at least
// once, so this is what it cannot beat; the goal is set-up within 2x of it. The fill is measured
// right before every run, so that the two see nearly the same machine (other processes, the
// hypervisor's memory); the report gives the best set-up over the best fill (STREAM's convention)
// and the median of the paired ratios. Ends with one JSON line.
//
//   pstar-bench-startup [--preset gpt2-medium] [--seq-len 128] [--rounds 1] [--steps 2]
//                       [--device-memory SIZE] [--baseline PSTAR] [--dir DIR]
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/formats/safetensors.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The parallel first-touch fill rate in bytes/s: `bytes` of fresh anonymous memory (advised into
// huge pages with `huge`) zeroed by one thread per core, each over its own contiguous share, in
// 1 MiB pieces. With `fault_only`, each thread writes one byte per 4 KiB page instead: the kernel
// zeroes every page as it faults it in, which is all that memory meant to read as zeros needs
// (Note [untouched blocks] in pstar/memory/exact_size_pool.h), the floor for such bytes.
double fill_rate(int64_t bytes, int threads, bool huge, bool fault_only = false) {
  auto* p = static_cast<char*>(mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) return 0;
  if (huge) (void)madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  const double begin = now_s();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([=] {
      const int64_t first = bytes / threads * t,
                    last = t + 1 == threads ? bytes : first + bytes / threads;
      if (fault_only) {
        for (int64_t at = first; at < last; at += 4096) static_cast<volatile char*>(p)[at] = 0;
        return;
      }
      for (int64_t at = first; at < last; at += int64_t{1} << 20)
        std::memset(p + at, 0, static_cast<size_t>(std::min<int64_t>(int64_t{1} << 20, last - at)));
    });
  }
  for (auto& w : workers) w.join();
  const double seconds = now_s() - begin;
  munmap(p, static_cast<size_t>(bytes));
  return static_cast<double>(bytes) / seconds;
}

// The bound's time for `bytes`: the faster of the two fills; with `fault_only`, of the two
// fault-ins.
double fill_seconds(int64_t bytes, int threads, bool fault_only = false) {
  const double rate = std::max(fill_rate(bytes, threads, false, fault_only),
                               fill_rate(bytes, threads, true, fault_only));
  return static_cast<double>(bytes) / rate;
}

struct Shape {
  int64_t hidden = 0, layers = 0, heads = 0, vocab = 50257;
};

Shape preset_shape(const std::string& preset) {
  if (preset == "gpt2-small") return {768, 12, 12};
  if (preset == "gpt2-medium") return {1024, 24, 16};
  if (preset == "gpt2-large") return {1280, 36, 20};
  if (preset == "gpt2-xl") return {1600, 48, 25};
  std::cerr << "unknown --preset " << preset << " (gpt2-small, gpt2-medium, gpt2-large, gpt2-xl)\n";
  std::exit(2);
}

// A Hugging Face GPT-2 folder of `shape` (config.json and model.safetensors, fp32), its values
// small and finite; returns the tensors' bytes.
int64_t write_hf_folder(const fs::path& dir, const Shape& s, int64_t seq_len) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << json{{"model_type", "gpt2"}, {"n_embd", s.hidden},    {"n_layer", s.layers},
              {"n_head", s.heads},    {"vocab_size", s.vocab}, {"n_positions", seq_len}}
             .dump(2);
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"wte.weight", {s.vocab, s.hidden}}, {"wpe.weight", {seq_len, s.hidden}}};
  const int64_t h = s.hidden;
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (const auto& t : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"ln_1.weight", {h}},
             {"ln_1.bias", {h}},
             {"attn.c_attn.weight", {h, 3 * h}},
             {"attn.c_attn.bias", {3 * h}},
             {"attn.c_proj.weight", {h, h}},
             {"attn.c_proj.bias", {h}},
             {"ln_2.weight", {h}},
             {"ln_2.bias", {h}},
             {"mlp.c_fc.weight", {h, 4 * h}},
             {"mlp.c_fc.bias", {4 * h}},
             {"mlp.c_proj.weight", {4 * h, h}},
             {"mlp.c_proj.bias", {h}}})
      tensors.emplace_back(p + t.first, t.second);
  }
  tensors.push_back({"ln_f.weight", {h}});
  tensors.push_back({"ln_f.bias", {h}});
  // Streamed one tensor at a time (the project's own safetensors writer), values in [-0.05, 0.05)
  // from a xorshift stream: quick to make, and a model that trains.
  std::vector<pstar::formats::SafetensorsStreamWriter::Entry> entries;
  int64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    entries.push_back({name, pstar::formats::DType::kF32, shape});
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    offset += 4 * numel;
  }
  pstar::formats::SafetensorsStreamWriter out((dir / "model.safetensors").string(), entries);
  std::vector<float> values;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (const auto& [name, shape] : tensors) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    values.resize(static_cast<size_t>(numel));
    for (float& v : values) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      v = static_cast<float>(state >> 40) * 0x1p-24f * 0.1f - 0.05f;
    }
    out.write(name, values.data(), values.size() * sizeof(float));
  }
  out.commit();
  return offset;
}

// Reads a file once, so that a run after finds it in the page cache.
void warm(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buffer(int64_t{1} << 24);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
  }
}

struct Run {
  json startup;  // the start-up record (none from a pstar without one: setup_s from its log)
  double setup_s = 0, step1_s = 0, step2_s = 0;
  double release_s = -1;  // from the log line (a pstar that logs it from 1 s only: -1 below that)
  double process_s = 0;   // the whole process
  double fill_s = 0;      // the first-touch fill of the payload bytes, measured just before
  double fault_s = 0;     // their fault-in alone (one byte a page), measured with the fill
};

double from_log(const std::string& text, const std::string& pattern) {
  std::smatch match;
  return std::regex_search(text, match, std::regex(pattern)) ? std::stod(match[1]) : -1;
}

Run run_pstar(const std::string& binary, const fs::path& dir, const std::string& name,
              const json& config) {
  const fs::path config_path = dir / (name + ".json"), metrics = dir / (name + ".jsonl"),
                 log = dir / (name + ".log");
  std::ofstream(config_path) << config.dump(2);
  // stderr to a file: the child's log (set-up and release lines) is parsed afterwards.
  const double begin = now_s();
  const int code = pstar::bench::run_program(
      {binary, "train", config_path.string(), "--device", "cpu", "--metrics", metrics.string()},
      nullptr, log.string());
  Run r;
  r.process_s = now_s() - begin;
  if (code != 0) {
    std::ifstream failed(log);
    std::cerr << name << ": " << binary << " train failed (" << code << "); its log ends:\n";
    std::vector<std::string> lines;
    for (std::string line; std::getline(failed, line);) lines.push_back(line);
    for (size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i)
      std::cerr << "  " << lines[i] << "\n";
    std::error_code ignored;
    fs::remove_all(dir, ignored);
    std::exit(1);
  }
  for (const std::string& line : pstar::bench::read_lines(metrics)) {
    const json m = json::parse(line);
    if (m.value("record", "") == "startup") r.startup = m;
    if (m.value("step", 0) == 1) r.step1_s = m["step_time_s"].get<double>();
    if (m.value("step", 0) == 2) r.step2_s = m["step_time_s"].get<double>();
  }
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  r.setup_s = r.startup.is_object() ? r.startup.value("setup_s", 0.0)
                                    : from_log(text, R"(set-up took ([0-9.]+) s)");
  r.release_s = from_log(text, R"(released the engine's memory in ([0-9.]+) s)");
  return r;
}

const char* kPhases[] = {"ranks", "plan",   "tier", "model",      "init",   "weights", "chunks",
                         "alloc", "engine", "data", "checkpoint", "resume", "other"};

double best_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "gpt2-medium", baseline, device_memory;
  int64_t seq_len = 128, rounds = 1, steps = 2;
  fs::path dir = fs::temp_directory_path() / ("pstar-bench-startup-" + std::to_string(getpid()));
  pstar::bench::parse_options(
      argc, argv,
      "pstar-bench-startup [--preset gpt2-medium] [--seq-len 128] [--rounds 1] [--steps 2] "
      "[--device-memory SIZE] [--baseline PSTAR] [--dir DIR]",
      {{"--preset", [&](const std::string& v) { preset = v; }},
       {"--seq-len", [&](const std::string& v) { seq_len = std::stoll(v); }},
       {"--rounds", [&](const std::string& v) { rounds = std::stoll(v); }},
       {"--steps", [&](const std::string& v) { steps = std::max<int64_t>(1, std::stoll(v)); }},
       {"--device-memory", [&](const std::string& v) { device_memory = v; }},
       {"--baseline", [&](const std::string& v) { baseline = v; }},
       {"--dir", [&](const std::string& v) { dir = v; }}});
  const Shape shape = preset_shape(preset);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  fs::create_directories(dir);
  const pstar::bench::TempCorpus corpus("startup");
  const fs::path folder = dir / "hf";
  const int64_t file_bytes = write_hf_folder(folder, shape, seq_len);
  warm(folder / "model.safetensors");
  // fp32 as in issue 35's measurement (16 bytes of payload per parameter: param, grad, momentum,
  // variance); a micro-batch of one sequence, so that a step stays short beside set-up.
  const int64_t params = shape.vocab * shape.hidden + seq_len * shape.hidden +
                         shape.layers * (12 * shape.hidden * shape.hidden + 13 * shape.hidden) +
                         2 * shape.hidden;
  json base = {{"data", {{"text", corpus.path.string()}}},
               {"train_micro_batch_size_per_gpu", 1},
               {"bf16", {{"enabled", false}}},
               {"training", {{"steps", steps}, {"log_interval", 1}}},
               {"engine", {{"mode", "chunked"}}}};
  // The emulated device tier's budget: by default every chunk ends in its margin after the warm-up,
  // moved there beside the host's copies, which a model of half the machine's memory cannot afford.
  if (!device_memory.empty()) base["engine"]["device_memory"] = device_memory;
  const std::vector<std::pair<std::string, json>> modes = {
      {"random",
       [&] {
         json c = base;
         c["model"] = {{"preset", preset}, {"seq_len", seq_len}};
         return c;
       }()},
      {"folder", [&] {
         json c = base;
         c["model"] = {{"init_from", folder.string()}};
         return c;
       }()}};
  std::vector<std::pair<std::string, std::string>> binaries = {{"pstar", PSTAR_BINARY}};
  if (!baseline.empty()) binaries.emplace_back("baseline", baseline);

  // Each run right after a fill of the same bytes, so that the two saw nearly the same machine
  // (other processes, the hypervisor's memory); rounds alternate which binary goes first.
  int64_t payload_bytes = 0;
  std::map<std::string, std::vector<Run>> runs;  // "<binary> <mode>"
  for (int64_t round = 0; round < rounds; ++round) {
    for (const auto& [mode, config] : modes) {
      for (size_t b = 0; b < binaries.size(); ++b) {
        const auto& [name, binary] = binaries[(b + static_cast<size_t>(round)) % binaries.size()];
        const int64_t bytes = payload_bytes > 0 ? payload_bytes : 16 * params;
        const double fill_s = fill_seconds(bytes, threads);
        const double fault_s = fill_seconds(bytes, threads, /*fault_only=*/true);
        Run r = run_pstar(binary, dir, name + "-" + mode, config);
        r.fill_s = fill_s;
        r.fault_s = fault_s;
        if (r.startup.is_object()) payload_bytes = r.startup.value("alloc_bytes", payload_bytes);
        runs[name + " " + mode].push_back(std::move(r));
      }
    }
  }
  if (payload_bytes == 0) payload_bytes = 16 * params;

  std::printf(
      "%s (%ld layers x %ld hidden, %.2fB parameters), seq_len %ld, fp32, chunk engine, "
      "%d threads, %ld round(s)\n",
      preset.c_str(), static_cast<long>(shape.layers), static_cast<long>(shape.hidden),
      static_cast<double>(params) / 1e9, static_cast<long>(seq_len), threads,
      static_cast<long>(rounds));
  std::printf("payload %.2f GiB; Hugging Face folder %.2f GiB (page cache warm)\n",
              static_cast<double>(payload_bytes) / (1 << 30),
              static_cast<double>(file_bytes) / (1 << 30));
  json rows = json::array();
  for (const auto& [key, list] : runs) {
    std::vector<double> setup, fill, ratio, fault, fault_ratio, step1, step2, release;
    for (const Run& r : list) {
      setup.push_back(r.setup_s);
      fill.push_back(r.fill_s);
      ratio.push_back(r.setup_s / r.fill_s);
      fault.push_back(r.fault_s);
      fault_ratio.push_back(r.setup_s / r.fault_s);
      step1.push_back(r.step1_s);
      step2.push_back(r.step2_s);
      if (r.release_s >= 0) release.push_back(r.release_s);  // a pstar that logs it from 1 s only
    }
    const Run& fastest = *std::min_element(
        list.begin(), list.end(), [](const Run& a, const Run& b) { return a.setup_s < b.setup_s; });
    std::string phases;
    if (fastest.startup.is_object()) {
      for (const char* p : kPhases) {
        const double s = fastest.startup.value(std::string(p) + "_s", 0.0);
        char piece[64];
        std::snprintf(piece, sizeof piece, " %s %.2f", p, s);
        if (s >= 0.05) phases += piece;
      }
    }
    std::printf(
        "%-15s set-up best %6.2f s, median %6.2f s; fill best %.2f s (%.2f GB/s); set-up "
        "/ fill: best/best %.2f, median paired %.2f\n",
        key.c_str(), best_of(setup), pstar::bench::median(setup), best_of(fill),
        static_cast<double>(payload_bytes) / best_of(fill) / 1e9, best_of(setup) / best_of(fill),
        pstar::bench::median(ratio));
    std::printf(
        "%-15s fault-in alone (the floor) best %.2f s (%.2f GB/s); set-up / fault-in: best/best "
        "%.2f, median paired %.2f\n",
        "", best_of(fault), static_cast<double>(payload_bytes) / best_of(fault) / 1e9,
        best_of(setup) / best_of(fault), pstar::bench::median(fault_ratio));
    // A pstar that logs the release from 1 s only: none logged means under 1 s each time.
    const std::string released = release.empty()
                                     ? std::string("under 1 s (not logged)")
                                     : std::to_string(pstar::bench::median(release)).substr(0, 5) +
                                           " s (" + std::to_string(release.size()) + " logged)";
    std::printf(
        "%-15s step 1 best %.2f s, median %.2f s; step 2 median %.2f s; release median %s; "
        "fastest set-up's phases:%s\n",
        "", best_of(step1), pstar::bench::median(step1), pstar::bench::median(step2),
        released.c_str(), phases.c_str());
    rows.push_back(
        {{"run", key},
         {"setup_s_best", best_of(setup)},
         {"setup_s_median", pstar::bench::median(setup)},
         {"fill_s_best", best_of(fill)},
         {"setup_over_fill_best", best_of(setup) / best_of(fill)},
         {"setup_over_fill_median_paired", pstar::bench::median(ratio)},
         {"fault_in_s_best", best_of(fault)},
         {"setup_over_fault_in_best", best_of(setup) / best_of(fault)},
         {"setup_over_fault_in_median_paired", pstar::bench::median(fault_ratio)},
         {"payload_gb_per_s_best", static_cast<double>(payload_bytes) / best_of(setup) / 1e9},
         {"step1_s_best", best_of(step1)},
         {"step1_s_median", pstar::bench::median(step1)},
         {"step2_s_median", pstar::bench::median(step2)},
         {"release_s_median",
          release.empty() ? json(nullptr) : json(pstar::bench::median(release))},
         {"fastest_startup", fastest.startup}});
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  std::cout << json{{"preset", preset},           {"params", params},
                    {"seq_len", seq_len},         {"threads", threads},
                    {"rounds", rounds},           {"payload_bytes", payload_bytes},
                    {"folder_bytes", file_bytes}, {"runs", rows}}
                   .dump()
            << "\n";
  return 0;
}
