// pstar-tokenize: turns a text file into a token file with one token per byte (vocab 256) and
// prints token statistics. Byte tokens need no vocabulary file, so any text trains out of the box.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/formats/token_file.h"

namespace {

struct TokenizeOptions {
  std::string input;
  std::string output;
  std::string dtype = "uint16";
};

// 'a' for printable ASCII (with \' and \\ escaped), 0x0a for anything else.
std::string describe_byte(uint32_t token) {
  if (token >= 0x20 && token < 0x7f) {
    const char c = static_cast<char>(token);
    if (c == '\'' || c == '\\') return std::string("'\\") + c + "'";
    return std::string("'") + c + "'";
  }
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02x", static_cast<unsigned>(token));
  return hex;
}

void print_statistics(const std::vector<uint32_t>& tokens) {
  std::array<int64_t, 256> counts{};
  for (uint32_t token : tokens) ++counts[token];

  std::vector<uint32_t> present;
  for (uint32_t t = 0; t < counts.size(); ++t) {
    if (counts[t] > 0) present.push_back(t);
  }
  // Most frequent first; ties in token order so the output is deterministic.
  std::sort(present.begin(), present.end(), [&](uint32_t a, uint32_t b) {
    return counts[a] != counts[b] ? counts[a] > counts[b] : a < b;
  });

  const auto total = static_cast<int64_t>(tokens.size());
  double entropy_bits = 0.0;
  for (uint32_t t : present) {
    const double p = static_cast<double>(counts[t]) / static_cast<double>(total);
    entropy_bits -= p * std::log2(p);
  }

  std::cout << "tokens:          " << total << "\n";
  std::cout << "distinct tokens: " << present.size() << " (vocab 256)\n";
  const size_t top = std::min<size_t>(10, present.size());
  if (top > 0) std::cout << "most frequent:\n";
  for (size_t i = 0; i < top; ++i) {
    const uint32_t t = present[i];
    const double percent = 100.0 * static_cast<double>(counts[t]) / static_cast<double>(total);
    char line[96];
    std::snprintf(line, sizeof(line), "  %3u %-6s %12lld  %6.2f%%\n", static_cast<unsigned>(t),
                  describe_byte(t).c_str(), static_cast<long long>(counts[t]), percent);
    std::cout << line;
  }
  char entropy_line[64];
  std::snprintf(entropy_line, sizeof(entropy_line), "unigram entropy: %.4f bits/token\n",
                entropy_bits);
  std::cout << entropy_line;
}

void run_tokenize(const TokenizeOptions& options) {
  const pstar::formats::TokenDType dtype =
      pstar::formats::parse_token_dtype(options.dtype, "--dtype");
  const pstar::formats::MappedFile text(options.input);
  // One uint32 per byte while building: simple, and fine for the text sizes this tool serves.
  std::vector<uint32_t> tokens(text.data(), text.data() + text.size());
  pstar::formats::write_token_file(options.output, dtype, tokens);
  std::cout << "wrote " << options.output << " (" << options.dtype << ", "
            << tokens.size() * pstar::formats::token_dtype_size(dtype) << " bytes)\n";
  print_statistics(tokens);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Turn a text file into a pstar token file, one token per byte (vocab 256)",
               "pstar-tokenize"};
  TokenizeOptions options;
  app.add_option("INPUT", options.input, "Text file to tokenize")->required();
  app.add_option("OUTPUT", options.output, "Token file to write (written atomically)")->required();
  app.add_option("--dtype", options.dtype, "Token id type of OUTPUT: uint16 or uint32")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A bad command line is a config error like any other, with the same exit code.
    std::cerr << "pstar-tokenize: " << e.what() << "; run with --help for usage\n";
    return pstar::error_exit_code(pstar::ErrorKind::kConfig);
  }

  try {
    run_tokenize(options);
  } catch (const pstar::Error& e) {
    std::cerr << "pstar-tokenize: " << e.what() << "\n";
    return pstar::error_exit_code(e.kind());
  }
  return 0;
}
