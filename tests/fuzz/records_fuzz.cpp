// Fuzz target: JSON Lines records (pstar::text::RecordTokenizer, Note [record masks]). The input is
// one line, for a fixed byte-level tokenizer with an NFC normalizer, special tokens and a
// post-processor prefix, and a ChatML-like template that trims contents.
//
// Beyond "only a BadRecord (kind and message) or FormatError naming what is wrong, never another
// exception": every id is below vocab_size(); the three loss_on settings give the same ids, and
// their flags nest (last_assistant within assistant within all, which flags everything); the
// tokens' texts of an accepted record spell a UTF-8 text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "pstar/formats/record_file.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/records.h"
#include "pstar/text/tokenizer.h"

namespace {

using namespace pstar;

std::string tokenizer_json() {
  std::string vocab;
  unsigned n = 0;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const unsigned cp = printable ? b : 256 + n++;
    char entry[32];
    std::snprintf(entry, sizeof(entry), "%s\"\\u%04x\": %u", b ? ", " : "", cp, b);
    vocab += entry;
  }
  vocab += R"(, "\u0120the": 256, "Paris": 257, "\u00c3\u00a9": 258)";
  return R"({"added_tokens": [
      {"id": 300, "content": "<s>", "special": true},
      {"id": 301, "content": "</s>", "special": true},
      {"id": 302, "content": "<|start|>", "special": true},
      {"id": 303, "content": "<|end|>", "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
    "model": {"type": "BPE", "ignore_merges": true, "merges": [], "vocab": {)" +
         vocab + "}}}";
}

struct Run {
  std::vector<uint32_t> tokens;
  std::optional<text::BadRecord> bad;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const text::Tokenizer tokenizer = text::Tokenizer::from_json(tokenizer_json(), "fuzz");
  static const text::ChatTemplate chat = text::ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}<|start|>{{ m.role }}\n{{ m.content | trim }}"
      "<|end|>\n{% endfor %}",
      "fuzz template", "<s>", "</s>");
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  Run runs[3];
  const text::LossOn modes[3] = {text::LossOn::kLastAssistant, text::LossOn::kAssistant,
                                 text::LossOn::kAll};
  for (int i = 0; i < 3; ++i) {
    text::RecordOptions options;
    options.loss_on = modes[i];
    text::RecordTokenizer records(tokenizer, &chat, options);
    text::RecordStats stats;
    try {
      runs[i].bad = records.tokenize(line, runs[i].tokens, stats);
    } catch (const std::exception& e) {
      fuzz::finding(std::string("tokenize threw instead of naming a bad record: ") + e.what());
    }
    if (runs[i].bad && (runs[i].bad->kind.empty() || runs[i].bad->message.empty()))
      fuzz::finding("a bad record without a kind or a message");
  }
  if (runs[0].bad.has_value() != runs[2].bad.has_value() ||
      runs[1].bad.has_value() != runs[2].bad.has_value())
    fuzz::finding("loss_on changed whether the record is bad");
  if (runs[2].bad) return 0;
  std::string spelled;
  for (int i = 0; i < 3; ++i) {
    if (runs[i].tokens.size() != runs[2].tokens.size()) fuzz::finding("loss_on changed the ids");
    for (size_t k = 0; k < runs[i].tokens.size(); ++k) {
      const uint32_t t = runs[i].tokens[k];
      const uint32_t id = formats::record_token_id(t);
      if (id != formats::record_token_id(runs[2].tokens[k])) fuzz::finding("loss_on changed an id");
      if (static_cast<int64_t>(id) >= tokenizer.vocab_size()) fuzz::finding("an id past the vocab");
      const bool counts = formats::record_token_counts(t);
      if (i == 2 && !counts) fuzz::finding("loss_on all left a token uncounted");
      if (i < 2 && counts && !formats::record_token_counts(runs[i + 1].tokens[k]))
        fuzz::finding("a token counts under a narrower loss_on but not a wider one");
      if (i == 2) spelled += tokenizer.token_text(id);
    }
  }
  try {
    (void)tokenizer.normalize(spelled);  // checks that it is UTF-8
  } catch (const Error& e) {
    fuzz::finding(std::string("the tokens spell no UTF-8 text: ") + e.what());
  }
  return 0;
}
