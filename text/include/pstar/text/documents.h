// Tokenizing text files as documents: what pstar-tokenize does, and what data.text with a
// tokenizer needs at start-up (text/README.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pstar/text/tokenizer.h"

namespace pstar::text {

struct DocumentOptions {
  // Separates documents inside a file (removed from the text); empty: each file is one document.
  std::string doc_sep;
  bool bos = false;  // the tokenizer's begin-of-text id before each document
  bool eos = false;  // its end-of-text id after each document
  // The size of the pieces fed to the encoder (Note [whole-text equivalence]): it bounds what is
  // copied at a time and how often progress is reported, never the ids.
  size_t piece_bytes = size_t{1} << 20;
};

struct TokenizeProgress {
  uint64_t bytes_done = 0, bytes_total = 0;
  uint64_t tokens = 0;
  uint64_t documents = 0;  // documents started, empty ones not counted
};

// Tokenizes `inputs` in order, as documents (DocumentOptions), giving `sink` the ids as they
// become final (each call's vector is reused afterwards) and `progress` the state after each
// piece. Every input is opened (memory-mapped) before any is read: IoError naming the first that
// cannot be. ConfigError when bos/eos is asked of a tokenizer that has no such token; FormatError
// naming the file and byte offset of text that is not UTF-8. An empty document yields no ids, not
// even bos/eos. Returns the totals.
TokenizeProgress tokenize_files(const Tokenizer& tokenizer, const std::vector<std::string>& inputs,
                                const DocumentOptions& options,
                                const std::function<void(const std::vector<uint32_t>&)>& sink,
                                const std::function<void(const TokenizeProgress&)>& progress = {});

}  // namespace pstar::text
