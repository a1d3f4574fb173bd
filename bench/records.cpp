// pstar-bench-records: data preparation for data.jsonl (text/records.h) in records and MB per
// second per core, against the tokenizer alone on the same rendered text in the same run
// (bench/README.md).
//
//   pstar-bench-records [--tokenizer FOLDER]... [--rounds 5]
//
// Default tokenizers: Llama 3.1's and Qwen2.5's tokenizer folders (with their chat templates)
// from scripts/fetch-tokenizer-data.sh's cache. The records are conversations made from the
// repository's English docs: each paragraph an assistant answer to a question made of its first
// words, a system prompt, three turns to a record, written as JSON Lines. Each round prepares
// every line with a fresh RecordTokenizer (JSON, template, the whole text's ids, the loss flags)
// and writes them into a record file (CRC-32 and all), as ensure_record_cache does; the
// baseline encodes the same conversations' rendered text, one record at a time, with one warm
// StreamEncoder. Figures are per second of the thread's CPU time; best and median of rounds.
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/formats/record_file.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/records.h"
#include "pstar/text/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The goal (issue 37): at least this many MB of JSON Lines per second per core.
constexpr double kGoalMbPerS = 10.0;

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double best(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Conversations from the docs' paragraphs: three (question, paragraph) turns to a record.
std::vector<std::string> make_records(const std::string& source) {
  std::vector<fs::path> files = {source + "/README.md"};
  for (const char* dir : {"docs", "formats", "text", "libengine", "cmd", "bench"})
    for (const auto& e : fs::directory_iterator(source + "/" + dir))
      if (e.path().extension() == ".md") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> paragraphs;
  for (const auto& f : files) {
    const std::string text = read(f);
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find("\n\n", pos);
      if (end == std::string::npos) end = text.size();
      if (end > pos + 40) paragraphs.push_back(text.substr(pos, end - pos));
      pos = end + 2;
    }
  }
  std::vector<std::string> lines;
  for (size_t i = 0; i + 3 <= paragraphs.size(); i += 3) {
    Json messages =
        Json::array({{{"role", "system"}, {"content", "You answer from pstar's docs."}}});
    for (size_t k = i; k < i + 3; ++k) {
      size_t cut = std::min<size_t>(40, paragraphs[k].size());  // never inside a character
      while (cut > 0 && (static_cast<unsigned char>(paragraphs[k][cut]) & 0xC0) == 0x80) --cut;
      messages.push_back(
          {{"role", "user"}, {"content", "Explain: " + paragraphs[k].substr(0, cut)}});
      messages.push_back({{"role", "assistant"}, {"content", paragraphs[k]}});
    }
    lines.push_back(Json{{"messages", messages}}.dump());
  }
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Data preparation of JSON Lines records (records and MB/s per core) against the "
      "tokenizer alone on the same rendered text",
      "pstar-bench-records"};
  std::vector<std::string> folders;
  int rounds = 5;
  app.add_option("--tokenizer", folders,
                 "Tokenizer folder(s) with tokenizer_config.json; default Llama 3.1 and Qwen2.5 "
                 "from the cache");
  app.add_option("--rounds", rounds, "Rounds per case")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const std::string source = PSTAR_SOURCE_DIR;
  if (folders.empty()) {
    const char* env = std::getenv("PSTAR_TOKENIZER_DATA");
    const std::string cache = env && *env ? env : source + "/.cache/tokenizers";
    for (const char* name : {"chat/llama3_1", "chat/qwen2_5"})
      if (fs::exists(cache + "/" + name)) folders.push_back(cache + "/" + name);
    if (folders.empty()) {
      std::printf(
          "no chat tokenizers in %s: run scripts/fetch-tokenizer-data.sh, or give "
          "--tokenizer\n",
          cache.c_str());
      return 0;
    }
  }
  const std::vector<std::string> lines = make_records(source);
  size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size() + 1;
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("records: %zu conversations, %.3f MB of JSON Lines; %d rounds per case, one thread\n",
              lines.size(), mb, rounds);
  const fs::path out =
      fs::temp_directory_path() / ("pstar-bench-records-" + std::to_string(::getpid()));

  try {
    Json result = {{"bench", "records"},
                   {"records", lines.size()},
                   {"jsonl_mb", mb},
                   {"goal_mb_per_s", kGoalMbPerS}};
    bool all_meet = true;
    for (const std::string& folder : folders) {
      const pstar::text::Tokenizer tokenizer = pstar::text::Tokenizer::load(folder);
      const pstar::text::ChatTemplate chat = pstar::text::ChatTemplate::load(folder);
      // The rendered texts, for the baseline.
      std::vector<std::string> rendered;
      size_t rendered_bytes = 0;
      for (const std::string& line : lines) {
        std::vector<pstar::text::ChatMessage> messages;
        const Json record = Json::parse(line);
        for (const Json& m : record["messages"])
          messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
        rendered.push_back(chat.render(messages, {}).text);
        rendered_bytes += rendered.back().size();
      }
      std::vector<double> prepare_s, encode_s;
      int64_t tokens = 0, counted = 0, baseline_tokens = 0;
      for (int r = 0; r < rounds; ++r) {
        // Alternate the order, so that neither case always runs on a warmer machine.
        for (int which = 0; which < 2; ++which) {
          if ((which == 0) == (r % 2 == 0)) {
            const double c0 = thread_cpu_s();
            pstar::text::RecordTokenizer records(tokenizer, &chat, {});
            pstar::formats::RecordFileWriter writer(out.string());
            pstar::text::RecordStats stats;
            std::vector<uint32_t> ids;
            for (size_t i = 0; i < lines.size(); ++i) {
              if (auto bad = records.tokenize(lines[i], ids, stats))
                PSTAR_THROW(FormatError, "record ", i + 1, ": ", bad->message);
              writer.add(ids, static_cast<int64_t>(i + 1));
            }
            writer.commit(stats.to_json());
            prepare_s.push_back(thread_cpu_s() - c0);
            tokens = stats.tokens;
            counted = stats.counted;
          } else {
            const double c0 = thread_cpu_s();
            pstar::text::StreamEncoder encoder(tokenizer);
            std::vector<uint32_t> ids;
            int64_t n = 0;
            for (const std::string& text : rendered) {
              ids.clear();
              encoder.feed(text, ids);
              encoder.finish(ids);
              n += static_cast<int64_t>(ids.size());
            }
            encode_s.push_back(thread_cpu_s() - c0);
            baseline_tokens = n;
          }
        }
      }
      fs::remove(out);
      const double prep_mbps = mb / best(prepare_s);
      const double prep_median = mb / median(prepare_s);
      const double records_per_s = static_cast<double>(lines.size()) / best(prepare_s);
      const double rendered_mb = static_cast<double>(rendered_bytes) / 1e6;
      const double encode_mbps = rendered_mb / best(encode_s);
      const double ratio = best(encode_s) / best(prepare_s);
      const std::string name = fs::path(folder).filename().string();
      const bool meets = prep_mbps >= kGoalMbPerS;
      std::printf(
          "%-10s prepare: %7.2f MB/s of JSONL per core (median %.2f), %.0f records/s, %lld tokens "
          "(%lld counted)\n"
          "%-10s tokenizer alone on the %.3f MB rendered: %.2f MB/s (%lld tokens, %s); "
          "preparation takes %.2fx its time; goal %.0f MB/s: %s\n",
          name.c_str(), prep_mbps, prep_median, records_per_s, static_cast<long long>(tokens),
          static_cast<long long>(counted), "", rendered_mb, encode_mbps,
          static_cast<long long>(baseline_tokens),
          baseline_tokens == tokens ? "the same ids' count" : "OTHER COUNT", 1.0 / ratio,
          kGoalMbPerS, meets ? "met" : "NOT met");
      all_meet = all_meet && meets;
      result["tokenizers"][name] = {{"prepare_mb_per_s", prep_mbps},
                                    {"median_prepare_mb_per_s", prep_median},
                                    {"records_per_s", records_per_s},
                                    {"rendered_mb", rendered_mb},
                                    {"tokenizer_mb_per_s", encode_mbps},
                                    {"tokenizer_time_fraction", ratio},
                                    {"tokens", tokens},
                                    {"counted", counted},
                                    {"same_token_count", baseline_tokens == tokens},
                                    {"meets_goal", meets}};
    }
    result["all_meet_goal"] = all_meet;
    std::printf("%s\n", result.dump().c_str());
  } catch (const pstar::Error& e) {
    fs::remove(out);
    std::fprintf(stderr, "pstar-bench-records: %s\n", e.what());
    return 1;
  }
  return 0;
}
