// pstar-tokenize: turns text files into a token file and prints token statistics. Without
// --tokenizer each byte is one token (vocabulary 256), so any text trains out of the box; with
// --tokenizer, a byte-level BPE tokenizer (Hugging Face tokenizer.json, or GPT-2's vocab.json +
// merges.txt) gives the ids Hugging Face's encode(text, add_special_tokens=False) would.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/formats/token_file.h"
#include "pstar/text/documents.h"
#include "pstar/text/tokenizer.h"

namespace {

using pstar::formats::TokenDType;

struct TokenizeOptions {
  std::vector<std::string> inputs;  // the INPUTs, then OUTPUT last
  std::string tokenizer;
  std::string dtype;  // empty: the smallest that holds the vocabulary
  bool eos = false;
  bool bos = false;
  std::optional<std::string> doc_sep;
};

// Inputs at least this large report progress on stderr while they are tokenized.
constexpr uint64_t kProgressBytes = uint64_t{16} << 20;

// A token's text for the statistics: printable ASCII and UTF-8 as they are, quoted, with \n, \t,
// \r, \\, \' and \xNN for the rest; at most 24 bytes.
std::string describe_text(const std::string& text) {
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < 24; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > 24) out += "...";
  return out + "'";
}

// Byte tokens as before: 'a' for printable ASCII (with \' and \\ escaped), 0x0a for the rest.
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

void print_statistics(const std::vector<int64_t>& counts, int64_t vocab_size,
                      const pstar::text::Tokenizer* tokenizer) {
  std::vector<uint32_t> present;
  int64_t total = 0;
  for (uint32_t t = 0; t < counts.size(); ++t) {
    if (counts[t] > 0) present.push_back(t);
    total += counts[t];
  }
  // Most frequent first; ties in token order so the output is deterministic.
  std::sort(present.begin(), present.end(), [&](uint32_t a, uint32_t b) {
    return counts[a] != counts[b] ? counts[a] > counts[b] : a < b;
  });
  double entropy_bits = 0.0;
  for (uint32_t t : present) {
    const double p = static_cast<double>(counts[t]) / static_cast<double>(total);
    entropy_bits -= p * std::log2(p);
  }

  std::cout << "tokens:          " << total << "\n";
  std::cout << "distinct tokens: " << present.size() << " (vocab " << vocab_size << ")\n";
  const size_t top = std::min<size_t>(10, present.size());
  if (top > 0) std::cout << "most frequent:\n";
  for (size_t i = 0; i < top; ++i) {
    const uint32_t t = present[i];
    const double percent = 100.0 * static_cast<double>(counts[t]) / static_cast<double>(total);
    const std::string what = tokenizer ? describe_text(tokenizer->token_text(t)) : describe_byte(t);
    char line[160];
    std::snprintf(line, sizeof(line),
                  tokenizer ? "  %6u %-26s %12lld  %6.2f%%\n" : "  %3u %-6s %12lld  %6.2f%%\n",
                  static_cast<unsigned>(t), what.c_str(), static_cast<long long>(counts[t]),
                  percent);
    std::cout << line;
  }
  char entropy_line[64];
  std::snprintf(entropy_line, sizeof(entropy_line), "unigram entropy: %.4f bits/token\n",
                entropy_bits);
  std::cout << entropy_line;
}

// Writes ids to the output file as they come and counts them for the statistics; nothing is
// published unless commit() is reached (TokenFileWriter).
class TokenWriter {
 public:
  TokenWriter(const std::string& path, TokenDType dtype, int64_t vocab_size)
      : writer_(path, dtype), counts_(static_cast<size_t>(vocab_size), 0) {}

  void append(const std::vector<uint32_t>& ids) {
    for (const uint32_t id : ids) {
      // The vocabulary was checked against the dtype; an id past it is a bug.
      PSTAR_INTERNAL_ASSERT(id < counts_.size(), "token id ", id, " is not below the vocabulary ",
                            counts_.size());
      ++counts_[id];
    }
    writer_.append(ids);
  }
  void commit() { writer_.commit(); }
  uint64_t size_bytes() const { return writer_.size_bytes(); }
  const std::vector<int64_t>& counts() const { return counts_; }

 private:
  pstar::formats::TokenFileWriter writer_;
  std::vector<int64_t> counts_;
};

std::string format_mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
  return buf;
}

void run_bytes(const TokenizeOptions& options, const std::vector<std::string>& inputs,
               const std::string& output) {
  PSTAR_CHECK(!options.eos && !options.bos && !options.doc_sep, ConfigError,
              "--eos, --bos and --doc-sep need --tokenizer: byte tokens have no begin or end "
              "token (the bytes of the inputs are written as they are, one after another)");
  const TokenDType dtype = pstar::formats::parse_token_dtype(
      options.dtype.empty() ? "uint16" : options.dtype, "--dtype");
  std::vector<pstar::formats::MappedFile> texts;
  for (const auto& input : inputs) texts.emplace_back(input);
  TokenWriter writer(output, dtype, 256);
  std::vector<uint32_t> tokens;
  for (const auto& text : texts) {
    tokens.assign(text.data(), text.data() + text.size());
    writer.append(tokens);
  }
  writer.commit();
  std::cout << "wrote " << output << " (" << pstar::formats::token_dtype_name(dtype) << ", "
            << writer.size_bytes() << " bytes)\n";
  print_statistics(writer.counts(), 256, nullptr);
}

void run_tokenizer(const TokenizeOptions& options, const std::vector<std::string>& inputs,
                   const std::string& output) {
  const pstar::text::Tokenizer tokenizer = pstar::text::Tokenizer::load(options.tokenizer);
  const int64_t vocab = tokenizer.vocab_size();
  const TokenDType dtype = options.dtype.empty()
                               ? (vocab <= 65536 ? TokenDType::kU16 : TokenDType::kU32)
                               : pstar::formats::parse_token_dtype(options.dtype, "--dtype");
  PSTAR_CHECK(dtype != TokenDType::kU16 || vocab <= 65536, ConfigError,
              "--dtype uint16 holds ids up to 65535, but the tokenizer ", options.tokenizer,
              " has ids up to ", vocab - 1, "; use --dtype uint32 (or leave --dtype out)");
  PSTAR_CHECK(!options.eos || tokenizer.eos_id(), ConfigError, "--eos: the tokenizer ",
              options.tokenizer,
              " has no end-of-text token (no eos_token in a tokenizer_config.json beside it, "
              "and none of <|endoftext|>, <|end_of_text|>, </s> among its special tokens)");
  PSTAR_CHECK(!options.bos || tokenizer.bos_id(), ConfigError, "--bos: the tokenizer ",
              options.tokenizer,
              " has no begin-of-text token (no bos_token in a tokenizer_config.json beside "
              "it, and none of <|endoftext|>, <|begin_of_text|>, <s> among its special tokens)");
  PSTAR_CHECK(!options.doc_sep || !options.doc_sep->empty(), ConfigError,
              "--doc-sep must not be empty (leave it out to make each INPUT one document)");
  std::cerr << "pstar-tokenize: " << tokenizer.description() << "\n";

  pstar::text::DocumentOptions doc;
  doc.doc_sep = options.doc_sep.value_or("");
  doc.eos = options.eos;
  doc.bos = options.bos;
  TokenWriter writer(output, dtype, vocab);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double next_report = 2.0;
  const auto totals = pstar::text::tokenize_files(
      tokenizer, inputs, doc, [&](const std::vector<uint32_t>& ids) { writer.append(ids); },
      [&](const pstar::text::TokenizeProgress& p) {
        if (p.bytes_total < kProgressBytes || seconds() < next_report) return;
        next_report = seconds() + 2.0;
        char line[160];
        std::snprintf(
            line, sizeof(line), "pstar-tokenize: %s of %s (%.0f%%), %.1f MB/s, %llu tokens\n",
            format_mb(static_cast<double>(p.bytes_done)).c_str(),
            format_mb(static_cast<double>(p.bytes_total)).c_str(),
            100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total),
            static_cast<double>(p.bytes_done) / 1e6 / seconds(),
            static_cast<unsigned long long>(p.tokens));
        std::cerr << line;
      });
  writer.commit();
  const double elapsed = seconds();
  char line[200];
  std::snprintf(line, sizeof(line),
                "pstar-tokenize: %s in %llu document(s) -> %llu tokens in %.2f s (%.1f MB/s, "
                "%.2f bytes per token)\n",
                format_mb(static_cast<double>(totals.bytes_total)).c_str(),
                static_cast<unsigned long long>(totals.documents),
                static_cast<unsigned long long>(totals.tokens), elapsed,
                elapsed > 0 ? static_cast<double>(totals.bytes_total) / 1e6 / elapsed : 0.0,
                totals.tokens
                    ? static_cast<double>(totals.bytes_total) / static_cast<double>(totals.tokens)
                    : 0.0);
  std::cerr << line;
  std::cout << "wrote " << output << " (" << pstar::formats::token_dtype_name(dtype) << ", "
            << writer.size_bytes() << " bytes)\n";
  print_statistics(writer.counts(), vocab, &tokenizer);
}

void run_tokenize(const TokenizeOptions& options) {
  PSTAR_CHECK(options.inputs.size() >= 2, ConfigError,
              "give at least one INPUT and the OUTPUT (the last argument)");
  const std::vector<std::string> inputs(options.inputs.begin(), options.inputs.end() - 1);
  const std::string& output = options.inputs.back();
  if (options.tokenizer.empty()) {
    run_bytes(options, inputs, output);
  } else {
    run_tokenizer(options, inputs, output);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Turn text files into a pstar token file: one token per byte (vocab 256), or the "
      "ids of a byte-level BPE tokenizer with --tokenizer",
      "pstar-tokenize"};
  TokenizeOptions options;
  app.add_option("FILES", options.inputs,
                 "INPUT... OUTPUT: the text files to tokenize, then the token file to write "
                 "(written atomically)")
      ->required()
      ->expected(2, -1);
  app.add_option("--tokenizer", options.tokenizer,
                 "A Hugging Face tokenizer.json, a folder holding one, or a folder with GPT-2's "
                 "vocab.json and merges.txt; without it each byte is one token");
  app.add_option("--dtype", options.dtype,
                 "Token id type of OUTPUT: uint16 or uint32 (default: uint16 for bytes, else the "
                 "smallest that holds the tokenizer's vocabulary)");
  app.add_flag("--eos", options.eos, "Append the tokenizer's end-of-text token to each document");
  app.add_flag("--bos", options.bos,
               "Prepend the tokenizer's begin-of-text token to each document");
  app.add_option("--doc-sep", options.doc_sep,
                 "A string that separates documents inside an INPUT (removed); default: each "
                 "INPUT is one document");

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
