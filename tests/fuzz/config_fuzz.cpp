// Fuzz target: the `pstar train` config parser with `--set` overrides
// (pstar::config::parse_train_config). The input is the JSON text, optionally followed by a line
// `---` and then one `--set` argument (KEY=VALUE) per line.
//
// Beyond "only ConfigError or IoError, naming the source": a config that parses must write back
// (to_json_text, the resolved config saved next to metrics and checkpoints) as text that parses
// again to the same config, or a run could not be reproduced from its own record.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "pstar/formats/config.h"

namespace {

constexpr char kSource[] = "fuzz-config.json";
constexpr char kBaseDir[] = "/fuzz-config-dir";
constexpr char kSeparator[] = "\n---\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstar;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t separator = input.find(kSeparator);
  const std::string json_text = input.substr(0, separator);
  std::vector<std::string> overrides;
  if (separator != std::string::npos) {
    const std::string lines = input.substr(separator + sizeof(kSeparator) - 1);
    size_t start = 0;
    while (start < lines.size()) {
      const size_t end = std::min(lines.find('\n', start), lines.size());
      overrides.push_back(lines.substr(start, end - start));
      start = end + 1;
    }
  }

  fuzz::expect_typed_errors(kSource, {ErrorKind::kConfig, ErrorKind::kIo}, [&] {
    const config::TrainConfig parsed =
        config::parse_train_config(json_text, kSource, kBaseDir, overrides);
    const std::string written = config::to_json_text(parsed);
    config::TrainConfig again;
    try {
      again = config::parse_train_config(written, "fuzz-written.json", kBaseDir);
    } catch (const Error& e) {
      fuzz::finding(
          str_cat("the written config does not parse again: ", e.what(), "\nwritten:\n", written));
    }
    const std::string rewritten = config::to_json_text(again);
    if (rewritten != written) {
      fuzz::finding(str_cat("the written config parses to a different config:\nfirst:\n", written,
                            "\nthen:\n", rewritten));
    }
  });
  return 0;
}
