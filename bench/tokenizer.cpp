// pstar-bench-tokenizer: the tokenizer's throughput on English text, one thread, against a plain
// copy and byte count of the same text in the same run (bench/README.md).
//
//   pstar-bench-tokenizer [--tokenizer PATH]... [--text FILE]... [--rounds 5]
//
// Default tokenizers: GPT-2's and Llama 3's from scripts/fetch-tokenizer-data.sh's cache
// ($PSTAR_TOKENIZER_DATA or .cache/tokenizers); default text: the repository's English docs
// (README.md, docs/*.md, the module READMEs). Each round encodes the whole text with a fresh
// StreamEncoder (so its BPE cache starts cold) in 1 MiB pieces, as pstar-tokenize does. Figures are
// MB (10^6 bytes) of text per second of the thread's CPU time (per core, and so robust to other
// processes on a shared machine), with the wall-clock figure beside; best and median of rounds.
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/text/tokenizer.h"

namespace {

namespace fs = std::filesystem;

// The benchmark's goal (issue 25): at least this many MB/s of English text per core.
constexpr double kGoalMbPerS = 10.0;

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  std::vector<double> cpu, wall;
  void add(double c, double w) {
    cpu.push_back(c);
    wall.push_back(w);
  }
  static double best(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenizer throughput (MB/s per core) against a copy and byte count of the text",
               "pstar-bench-tokenizer"};
  std::vector<std::string> tokenizers, texts;
  int rounds = 5;
  app.add_option("--tokenizer", tokenizers,
                 "Tokenizer path(s); default GPT-2 and Llama 3 from the cache");
  app.add_option("--text", texts, "Text file(s), concatenated; default the repository's docs");
  app.add_option("--rounds", rounds, "Rounds per case")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const std::string source = PSTAR_SOURCE_DIR;
  if (tokenizers.empty()) {
    const char* env = std::getenv("PSTAR_TOKENIZER_DATA");
    const std::string cache = env && *env ? env : source + "/.cache/tokenizers";
    for (const char* name : {"gpt2", "llama3"}) {
      if (fs::exists(cache + "/" + name)) tokenizers.push_back(cache + "/" + name);
    }
    if (tokenizers.empty()) {
      std::printf("no tokenizers in %s: run scripts/fetch-tokenizer-data.sh, or give --tokenizer\n",
                  cache.c_str());
      return 0;
    }
  }
  std::string text;
  if (texts.empty()) {
    std::vector<fs::path> files = {source + "/README.md"};
    for (const char* dir : {"docs", "formats", "text", "libengine", "cmd", "bench"}) {
      for (const auto& e : fs::directory_iterator(source + "/" + dir)) {
        if (e.path().extension() == ".md") files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) text += read(f);
  } else {
    for (const auto& f : texts) text += read(f);
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("text: %.3f MB; %d rounds per case, one thread\n", mb, rounds);

  try {
    // Baselines: a copy of the text and a count of its newlines, the least any tokenizer must do.
    Timing copy, count;
    std::string buffer(text.size(), '\0');
    size_t newlines = 0;
    for (int r = 0; r < rounds * 3; ++r) {
      double c0 = thread_cpu_s(), w0 = wall_s();
      std::memcpy(buffer.data(), text.data(), text.size());
      copy.add(thread_cpu_s() - c0, wall_s() - w0);
      c0 = thread_cpu_s();
      w0 = wall_s();
      newlines += static_cast<size_t>(std::count(buffer.begin(), buffer.end(), '\n'));
      count.add(thread_cpu_s() - c0, wall_s() - w0);
    }
    const double copy_mbps = mb / Timing::best(copy.cpu);
    const double count_mbps = mb / Timing::best(count.cpu);
    std::printf("copy:        %9.1f MB/s   byte count: %9.1f MB/s  (%zu newlines)\n", copy_mbps,
                count_mbps, newlines / static_cast<size_t>(rounds * 3));

    nlohmann::json result = {{"bench", "tokenizer"},
                             {"text_mb", mb},
                             {"copy_mb_per_s", copy_mbps},
                             {"count_mb_per_s", count_mbps},
                             {"goal_mb_per_s", kGoalMbPerS}};
    bool all_meet = true;
    for (const auto& path : tokenizers) {
      const double l0 = wall_s();
      const pstar::text::Tokenizer t = pstar::text::Tokenizer::load(path);
      const double load_s = wall_s() - l0;
      Timing timing;
      size_t tokens = 0;
      for (int r = 0; r < rounds; ++r) {
        std::vector<uint32_t> ids;
        ids.reserve(text.size() / 2);
        const double c0 = thread_cpu_s(), w0 = wall_s();
        pstar::text::StreamEncoder encoder(t);
        for (size_t pos = 0; pos < text.size(); pos += size_t{1} << 20) {
          encoder.feed(std::string_view(text).substr(pos, size_t{1} << 20), ids);
        }
        encoder.finish(ids);
        timing.add(thread_cpu_s() - c0, wall_s() - w0);
        tokens = ids.size();
      }
      const double best = mb / Timing::best(timing.cpu), median = mb / Timing::median(timing.cpu);
      const double wall_best = mb / Timing::best(timing.wall);
      const std::string name = fs::path(path).filename().string();
      std::printf(
          "%-12s %7.2f MB/s per core (median %.2f; wall %.2f), %zu tokens (%.2f bytes/token), "
          "%.4f of copy, %.4f of byte count; goal %.0f MB/s: %s; loaded in %.2f s\n",
          name.c_str(), best, median, wall_best, tokens,
          static_cast<double>(text.size()) / static_cast<double>(tokens), best / copy_mbps,
          best / count_mbps, kGoalMbPerS, best >= kGoalMbPerS ? "met" : "NOT met", load_s);
      all_meet = all_meet && best >= kGoalMbPerS;
      result["tokenizers"][name] = {{"mb_per_s", best},
                                    {"median_mb_per_s", median},
                                    {"wall_mb_per_s", wall_best},
                                    {"tokens", tokens},
                                    {"fraction_of_copy", best / copy_mbps},
                                    {"fraction_of_count", best / count_mbps},
                                    {"meets_goal", best >= kGoalMbPerS},
                                    {"load_s", load_s}};
    }
    result["all_meet_goal"] = all_meet;
    std::printf("%s\n", result.dump().c_str());
  } catch (const pstar::Error& e) {
    std::fprintf(stderr, "pstar-bench-tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
