#include "pstar/text/token_cache.h"

#include <sys/stat.h>

#include <cstdio>

#include "pstar/formats/mapped_file.h"

namespace pstar::text {
namespace {

void fnv1a(uint64_t& h, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
}

void fnv1a_field(uint64_t& h, const std::string& s) {
  const uint64_t size = s.size();
  fnv1a(h, &size, sizeof(size));  // the length first, so fields cannot run into each other
  fnv1a(h, s.data(), s.size());
}

}  // namespace

TokenCache token_cache_path(const Tokenizer& tokenizer, const std::string& text_path,
                            const DocumentOptions& options) {
  TokenCache cache;
  cache.dtype =
      tokenizer.vocab_size() <= 65536 ? formats::TokenDType::kU16 : formats::TokenDType::kU32;
  uint64_t h = 0xcbf29ce484222325ull;
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
  formats::AtomicFileWriter writer(cache.path);
  const size_t width = formats::token_dtype_size(cache.dtype);
  std::vector<uint8_t> bytes;
  cache.totals = tokenize_files(
      tokenizer, {text_path}, options,
      [&](const std::vector<uint32_t>& ids) {
        bytes.resize(ids.size() * width);
        uint8_t* p = bytes.data();
        for (const uint32_t id : ids) {
          for (size_t b = 0; b < width; ++b) *p++ = static_cast<uint8_t>(id >> (8 * b));
        }
        writer.append(bytes.data(), bytes.size());
      },
      progress);
  writer.commit();
  cache.created = true;
  return cache;
}

}  // namespace pstar::text
