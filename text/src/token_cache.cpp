#include "pstar/text/token_cache.h"

#include <sys/stat.h>

#include <cstdio>

#include "checksum.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/formats/token_file.h"

namespace pstar::text {
namespace {}  // namespace

TokenCache token_cache_path(const Tokenizer& tokenizer, const std::string& text_path,
                            const DocumentOptions& options) {
  TokenCache cache;
  cache.dtype =
      tokenizer.vocab_size() <= 65536 ? formats::TokenDType::kU16 : formats::TokenDType::kU32;
  uint64_t h = kFnvOffset;
  fnv1a_field(h, tokenizer.fingerprint());
  fnv1a_field(h, options.doc_sep);
  fnv1a_field(h, std::string(options.bos ? "bos" : "") + (options.eos ? "eos" : ""));
  const formats::MappedFile text(text_path);
  fnv1a(h, text.data(), text.size());
  char key[17];
  std::snprintf(key, sizeof(key), "%016llx", static_cast<unsigned long long>(h));
  cache.path = text_path + ".pstar-" + key +
               (cache.dtype == formats::TokenDType::kU16 ? ".uint16" : ".uint32") + ".tokens";
  return cache;
}

TokenCache ensure_token_cache(const Tokenizer& tokenizer, const std::string& text_path,
                              const DocumentOptions& options,
                              const std::function<void(const TokenizeProgress&)>& progress) {
  TokenCache cache = token_cache_path(tokenizer, text_path, options);
  struct stat st {};
  if (::stat(cache.path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return cache;
  formats::TokenFileWriter writer(cache.path, cache.dtype);
  cache.totals = tokenize_files(
      tokenizer, {text_path}, options,
      [&](const std::vector<uint32_t>& ids) { writer.append(ids); }, progress);
  writer.commit();
  cache.created = true;
  return cache;
}

}  // namespace pstar::text
