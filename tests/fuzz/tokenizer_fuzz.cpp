// Fuzz target: tokenizers (pstar::text). An input holding a NUL byte is a tokenizer.json (before
// it) and a text (after it); one without is a text for a fixed tokenizer that has every stage:
// added tokens matched before and after NFC, a Split with Llama 3's regex, a Split on a string
// with the Contiguous behaviour, ByteLevel with a prefix space, and BPE with merges.
//
// Beyond "only FormatError, naming the file when loading": every id is below vocab_size(), and
// the text fed in pieces of 1, 2, 3, 5 and 64 bytes gives the ids of the whole text (Note
// [whole-text equivalence] in tokenizer.h), or the same error.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "pstar/text/tokenizer.h"

namespace {

using pstar::text::StreamEncoder;
using pstar::text::Tokenizer;

// Every byte in the byte-level alphabet (as JSON escapes), some merges, and the stages above.
std::string fixed_tokenizer_json() {
  std::string vocab;
  unsigned n = 0;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const unsigned cp = printable ? b : 256 + n++;
    char entry[32];
    std::snprintf(entry, sizeof(entry), "%s\"\\u%04x\": %u", b ? ", " : "", cp, b);
    vocab += entry;
  }
  vocab += R"(, "\u0120t": 256, "he": 257, "\u0120the": 258, "in": 259, "\u0120\u0120": 260)";
  return R"({"added_tokens": [
      {"id": 261, "content": "<|x|>", "special": true, "normalized": false},
      {"id": 262, "content": "<|x|>y", "special": false, "normalized": false},
      {"id": 263, "content": "caf\u00e9", "special": false, "normalized": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "Split", "pattern": {"String": "-"}, "behavior": "Contiguous", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": true, "use_regex": false}]},
    "model": {"type": "BPE", "vocab": {)" +
         vocab + R"(}, "merges": ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 \u0120"]}})";
}

// The ids of `text` fed in pieces of `size` bytes, or the error's message.
std::vector<uint32_t> encode(const Tokenizer& t, std::string_view text, size_t size,
                             std::optional<std::string>& error) {
  std::vector<uint32_t> ids;
  try {
    StreamEncoder encoder(t);
    for (size_t pos = 0; pos < text.size(); pos += size) encoder.feed(text.substr(pos, size), ids);
    encoder.finish(ids);
  } catch (const pstar::FormatError& e) {
    error = e.what();
  }
  return ids;
}

void check(const Tokenizer& t, std::string_view text) {
  std::optional<std::string> whole_error;
  const std::vector<uint32_t> whole = encode(t, text, text.size() + 1, whole_error);
  for (const uint32_t id : whole) {
    if (id >= t.vocab_size()) {
      pstar::fuzz::finding(pstar::str_cat("id ", id, " is not below vocab_size ", t.vocab_size()));
    }
  }
  for (const size_t size : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{64}}) {
    std::optional<std::string> error;
    const std::vector<uint32_t> ids = encode(t, text, size, error);
    if (error.has_value() != whole_error.has_value()) {
      pstar::fuzz::finding(pstar::str_cat(
          "pieces of ", size, " bytes ", error ? "failed: " + *error : "succeeded",
          " where the whole text ", whole_error ? "failed: " + *whole_error : "succeeded"));
    }
    if (!error && ids != whole) {
      pstar::fuzz::finding(
          pstar::str_cat("pieces of ", size, " bytes give other ids than the whole text"));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer fixed = Tokenizer::from_json(fixed_tokenizer_json(), "fixed.json");
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) {
    check(fixed, input);
    return 0;
  }
  std::optional<Tokenizer> loaded;
  pstar::fuzz::expect_typed_errors("fuzz.json", {pstar::ErrorKind::kFormat}, [&] {
    loaded = Tokenizer::from_json(input.substr(0, nul), "fuzz.json");
  });
  if (loaded) check(*loaded, input.substr(nul + 1));
  return 0;
}
