// RecordTokenizer (Note [record masks]): which tokens of a conversation, a prompt/completion pair
// and a text count in the loss, on a small tokenizer and template. The independent check is the
// text of the counted tokens, spelled from their token texts, against the assistant contents as
// the template writes them plus the end-of-turn token.
#include "pstar/text/records.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "record_fixtures.h"

namespace pstar::text {
namespace {

using formats::record_token_counts;
using formats::record_token_id;
using testing::all_text;
using testing::counted_text;
using testing::small_template;
using testing::small_tokenizer;

struct Result {
  std::vector<uint32_t> tokens;
  RecordStats stats;
  std::optional<BadRecord> bad;
};

Result run(const std::string& line, LossOn loss_on = LossOn::kAssistant,
           const testing::SmallOptions& o = {}) {
  const Tokenizer t = small_tokenizer(o);
  const ChatTemplate chat = small_template();
  RecordOptions options;
  options.loss_on = loss_on;
  RecordTokenizer records(t, &chat, options);
  Result r;
  r.bad = records.tokenize(line, r.tokens, r.stats);
  return r;
}

const char* kConversation =
    R"({"messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Capital?"},
                     {"role": "assistant", "content": " Paris is the capital. "},
                     {"role": "user", "content": "Hello"},
                     {"role": "assistant", "content": "Hello user"}], "id": 7})";

TEST(RecordMasks, AssistantContentsAndTheirEndOfTurnCount) {
  const Tokenizer t = small_tokenizer();
  const Result r = run(kConversation);
  ASSERT_FALSE(r.bad) << r.bad->message;
  // The ids are those of the whole rendered text.
  const std::string rendered =
      "<s><|start|>system\nBe brief.<|end|>\n<|start|>user\nCapital?<|end|>\n<|start|>assistant\n"
      "Paris is the capital.<|end|>\n<|start|>user\nHello<|end|>\n<|start|>assistant\nHello "
      "user<|end|>\n";
  std::vector<uint32_t> ids;
  for (uint32_t token : r.tokens) ids.push_back(record_token_id(token));
  EXPECT_EQ(ids, t.encode(rendered));
  EXPECT_EQ(all_text(t, r.tokens), rendered);
  EXPECT_EQ(counted_text(t, r.tokens), "Paris is the capital.<|end|>Hello user<|end|>");
  EXPECT_EQ(r.stats.conversations, 1);
  EXPECT_EQ(r.stats.tokens, static_cast<int64_t>(ids.size()));
  // "Paris", " is", " the", " capital", "." and <|end|>; "Hello", " ", "u", "s", "e", "r", <|end|>
  // ("user" is a word only without its space).
  EXPECT_EQ(r.stats.counted, 13);
}

TEST(RecordMasks, LastAssistantOnlyAndAll) {
  const Tokenizer t = small_tokenizer();
  const Result last = run(kConversation, LossOn::kLastAssistant);
  ASSERT_FALSE(last.bad);
  EXPECT_EQ(counted_text(t, last.tokens), "Hello user<|end|>");
  const Result all = run(kConversation, LossOn::kAll);
  ASSERT_FALSE(all.bad);
  EXPECT_EQ(all.stats.counted, all.stats.tokens - 1);  // every target
  EXPECT_EQ(counted_text(t, all.tokens), all_text(t, all.tokens));
}

TEST(RecordMasks, ConversationWithoutAnAssistantCountsNothingAndIsCounted) {
  const Result r = run(R"({"messages": [{"role": "user", "content": "Hello"}]})");
  ASSERT_FALSE(r.bad);
  EXPECT_GT(r.tokens.size(), 0u);
  EXPECT_EQ(r.stats.counted, 0);
  EXPECT_EQ(r.stats.no_assistant, 1);
  EXPECT_EQ(r.stats.conversations, 1);
}

TEST(RecordMasks, EmptyAssistantContentStillCountsItsEndOfTurn) {
  const Tokenizer t = small_tokenizer();
  for (const char* content : {"", "   ", "\n\t"}) {
    const Result r = run(std::string(R"({"messages": [{"role": "user", "content": "Hello"},
                                                      {"role": "assistant", "content": ")") +
                         (content[0] == '\n' ? "\\n\\t" : content) + R"("}]})");
    ASSERT_FALSE(r.bad) << r.bad->message;
    EXPECT_EQ(counted_text(t, r.tokens), "<|end|>") << "content '" << content << "'";
    EXPECT_EQ(r.stats.empty_turns_uncounted, 0);
  }
}

TEST(RecordMasks, NfcNormalizerOffsetsFollowTheComposedText) {
  testing::SmallOptions o;
  o.nfc = true;
  const Tokenizer t = small_tokenizer(o);
  // "e" + U+0301 composes to U+00E9: the text the tokens spell is shorter than the rendered one,
  // so offsets taken on the rendered text would be off by one after the first of them.
  const Result r = run(R"({"messages": [{"role": "user", "content": "Cafe\u0301?"},
                                       {"role": "assistant", "content": "Cafe\u0301 cafe\u0301"}]})",
                       LossOn::kAssistant, o);
  ASSERT_FALSE(r.bad) << r.bad->message;
  EXPECT_EQ(counted_text(t, r.tokens), "Caf\xC3\xA9 caf\xC3\xA9<|end|>");
}

TEST(RecordMasks, TokenTextsThatDoNotSpellTheTextAreRefused) {
  testing::SmallOptions o;
  o.prefix_space = true;  // ByteLevel adds a space the text does not have
  const Result r = run(kConversation, LossOn::kAssistant, o);
  ASSERT_TRUE(r.bad);
  EXPECT_EQ(r.bad->kind, "unaligned tokens");
  EXPECT_NE(r.bad->message.find("do not spell the text"), std::string::npos) << r.bad->message;
}

TEST(RecordMasks, PromptCompletionCountsTheCompletionAndEos) {
  const Tokenizer t = small_tokenizer();
  const Result r = run(R"({"prompt": "The capital?", "completion": " Paris"})");
  ASSERT_FALSE(r.bad) << r.bad->message;
  EXPECT_EQ(all_text(t, r.tokens), "<s>The capital? Paris</s>");
  EXPECT_EQ(counted_text(t, r.tokens), " Paris</s>");
  EXPECT_EQ(record_token_id(r.tokens.front()), 300u);  // the post-processor's <s>
  EXPECT_FALSE(record_token_counts(r.tokens.front()));
  EXPECT_EQ(r.stats.pairs, 1);

  // Without a prefixing post-processor there is no <s>.
  testing::SmallOptions o;
  o.post_processor = false;
  const Result bare = run(R"({"prompt": "Q", "completion": "A"})", LossOn::kAssistant, o);
  EXPECT_EQ(all_text(small_tokenizer(o), bare.tokens), "QA</s>");
}

TEST(RecordMasks, TextCountsEverything) {
  const Tokenizer t = small_tokenizer();
  const Result r = run(R"({"text": "Paris is the capital.", "source": "wiki"})");
  ASSERT_FALSE(r.bad);
  EXPECT_EQ(all_text(t, r.tokens), "<s>Paris is the capital.</s>");
  // Every token is flagged; the first is never a target, so every target counts.
  EXPECT_EQ(counted_text(t, r.tokens), all_text(t, r.tokens));
  EXPECT_EQ(r.stats.counted, r.stats.tokens - 1);
  EXPECT_EQ(r.stats.texts, 1);
  const Result empty = run(R"({"text": ""})");
  EXPECT_EQ(all_text(t, empty.tokens), "<s></s>");
}

TEST(RecordMasks, ATemplatesRaiseExceptionIsABadRecordWithItsMessage) {
  const Tokenizer t = small_tokenizer();
  const ChatTemplate strict = ChatTemplate::parse(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with the "
      "user') }}{% endif %}{% for m in messages %}{{ m.content }}<|end|>{% endfor %}",
      "strict template", "<s>", "</s>");
  RecordTokenizer records(t, &strict, {});
  std::vector<uint32_t> out;
  RecordStats stats;
  const auto bad =
      records.tokenize(R"({"messages": [{"role": "assistant", "content": "Hello"}]})", out, stats);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->kind, "template refused");
  EXPECT_NE(bad->message.find("Conversations must start with the user"), std::string::npos)
      << bad->message;
  EXPECT_EQ(stats.records(), 0);
}

TEST(RecordMasks, ReasoningContentCountsAndKwargsReachTheTemplate) {
  // A template that writes an assistant's reasoning_content before its content, and a flag from
  // data.chat_template_kwargs: the reasoning is the assistant's text and counts; the flag's text
  // is the template's.
  const Tokenizer t = small_tokenizer();
  const ChatTemplate chat = ChatTemplate::parse(
      "{% for m in messages %}<|start|>{{ m.role }}\n{% if m.reasoning_content is defined %}"
      "{{ m.reasoning_content }}|{% endif %}{{ m.content }}<|end|>{% endfor %}"
      "{% if verbose is true %}Hello{% endif %}",
      "reasoning template", "<s>", "</s>");
  RecordOptions options;
  options.template_kwargs = R"({"verbose": true})";
  RecordTokenizer records(t, &chat, options);
  std::vector<uint32_t> tokens;
  RecordStats stats;
  const auto bad = records.tokenize(
      R"({"messages": [{"role": "user", "content": "Capital?"},)"
      R"( {"role": "assistant", "reasoning_content": "the capital", "content": "Paris"}]})",
      tokens, stats);
  ASSERT_FALSE(bad) << bad->message;
  EXPECT_EQ(all_text(t, tokens),
            "<|start|>user\nCapital?<|end|><|start|>assistant\nthe capital|Paris<|end|>Hello");
  EXPECT_EQ(counted_text(t, tokens), "the capitalParis<|end|>");
  // reasoning_content must be a string (or null, as if absent).
  EXPECT_EQ(records
                .tokenize(R"({"messages": [{"role": "assistant", "content": "a",)"
                          R"( "reasoning_content": 3}]})",
                          tokens, stats)
                ->kind,
            "wrong type");
  EXPECT_FALSE(records.tokenize(R"({"messages": [{"role": "assistant", "content": "a",)"
                                R"( "reasoning_content": null}]})",
                                tokens, stats));
}

TEST(RecordMasks, ConversationWithoutATemplateSaysWhy) {
  const Tokenizer t = small_tokenizer();
  RecordTokenizer records(t, nullptr, {}, "no chat_template in x/tokenizer_config.json");
  std::vector<uint32_t> out;
  RecordStats stats;
  const auto bad = records.tokenize(kConversation, out, stats);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->message, "no chat_template in x/tokenizer_config.json");
  EXPECT_FALSE(records.tokenize(R"({"text": "fine"})", out, stats));
}

}  // namespace
}  // namespace pstar::text
