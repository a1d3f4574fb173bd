// A text file's tokens under a tokenizer, cached in a token file beside it: what `data.text` with
// `data.tokenizer` needs at start-up (not wired into the config yet; text/README.md).
//
// Note [token cache]
// The cache of TEXT is "TEXT.pstar-<key>.<uint16|uint32>.tokens", a plain token file
// (formats/token_file.h) in the dtype that holds the tokenizer's vocabulary. <key> is 16 hex
// digits of FNV-1a over the tokenizer's fingerprint (its files), the document options and the
// text's bytes, so an edited text, another tokenizer or other options make another file and a
// stale one is never read. A second run with the same inputs maps the file at once. It is written
// atomically (Note [publish by rename] in file_guard.h): ranks that race to create it each
// publish a whole, identical file.
#pragma once

#include <functional>
#include <string>

#include "pstar/formats/token_file.h"
#include "pstar/text/documents.h"
#include "pstar/text/tokenizer.h"

namespace pstar::text {

struct TokenCache {
  std::string path;  // the token file
  formats::TokenDType dtype = formats::TokenDType::kU16;
  bool created = false;     // tokenized by this call (false: it was there)
  TokenizeProgress totals;  // of the tokenization, when created
};

// The cache's path for `text_path` (reads the text once for its checksum).
TokenCache token_cache_path(const Tokenizer& tokenizer, const std::string& text_path,
                            const DocumentOptions& options = {});

// The cache for `text_path`, tokenized (one document unless options.doc_sep says otherwise) and
// written first when absent. IoError when the text cannot be read or the cache not written
// beside it; the errors of tokenize_files otherwise.
TokenCache ensure_token_cache(const Tokenizer& tokenizer, const std::string& text_path,
                              const DocumentOptions& options = {},
                              const std::function<void(const TokenizeProgress&)>& progress = {});

}  // namespace pstar::text
