// Records on the real Llama 3, 3.1, 3.2, Qwen2.5, Qwen3 and Gemma 3 tokenizers and chat templates
// (fetched by scripts/fetch-tokenizer-data.sh): the ids of every conversation of tests/data/chat
// equal those Hugging Face's renderer and encoders gave (the reference the fetch script computed),
// a conversation the template refuses is a bad record, and the tokens that count spell exactly
// the assistant contents as each template writes them (Llama's and Gemma's templates trim a
// content, Qwen's do not; Qwen's normalizer composes NFC, Gemma's writes spaces as "▁"; Qwen3's
// puts an empty <think> block before the turns after the last user turn, which does not count, and
// strips their leading newlines) followed by the family's end-of-turn token. That text is worked
// out here from the messages, not from the renderer's spans; the conversations whose reasoning
// Qwen3's template moves into a <think> block are checked by hand in records_template_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/formats/record_file.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/records.h"
#include "pstar/text/tokenizer.h"
#include "pstar_test_paths.h"
#include "text/tokenizer_data.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using testing::read_json;
using testing::tokenizer_data_dir;
using Json = nlohmann::json;

// Python's str.strip() on the whitespace Jinja's trim removes (ASCII and the Unicode spaces the
// test conversations use).
std::string trim(const std::string& s) {
  const std::vector<std::string> spaces = {" ",  "\t", "\n",       "\r",
                                           "\f", "\v", "\xC2\xA0", "\xE3\x80\x80"};
  size_t b = 0, e = s.size();
  for (bool more = true; more;) {
    more = false;
    for (const auto& w : spaces)
      if (s.compare(b, w.size(), w) == 0 && b + w.size() <= e) b += w.size(), more = true;
  }
  for (bool more = true; more;) {
    more = false;
    for (const auto& w : spaces)
      if (e >= b + w.size() && s.compare(e - w.size(), w.size(), w) == 0)
        e -= w.size(), more = true;
  }
  return s.substr(b, e - b);
}

struct Family {
  const char* name;
  bool trims;  // the template writes content | trim
  const char* end_of_turn;
  // Qwen3: the turns after the last user turn are written after an empty <think> block, with
  // their leading newlines stripped; reasoning (<think> in a content, reasoning_content) is
  // rewritten.
  bool think = false;
};

std::string lstrip_newlines(const std::string& s) {
  const size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? "" : s.substr(b);
}

class RealRecords : public ::testing::TestWithParam<Family> {};

TEST_P(RealRecords, IdsAreHuggingFacesAndTheCountedTokensAreTheAnswers) {
  const Family family = GetParam();
  const fs::path reference =
      fs::path(tokenizer_data_dir()) / "reference" / "chat" / (std::string(family.name) + ".json");
  if (!fs::exists(reference))
    GTEST_SKIP() << "no chat reference at " << reference
                 << ": run scripts/fetch-tokenizer-data.sh (needs node and npm; scripts/test.sh "
                    "runs it)";
  const std::string folder = (fs::path(tokenizer_data_dir()) / "chat" / family.name).string();
  const Tokenizer& tokenizer = testing::family_tokenizer(family.name);
  const ChatTemplate chat = ChatTemplate::load(folder);
  const Json cases = read_json(PSTAR_SOURCE_DIR "/tests/data/chat/conversations.json");
  const Json expected = read_json(reference);
  ASSERT_EQ(cases.size(), expected.size()) << "stale reference: rerun the fetch script";
  int compared = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    // Records are rendered without the generation prompt.
    if (c.value("add_generation_prompt", false)) continue;
    SCOPED_TRACE(std::string(family.name) + " / " + c["name"].get<std::string>());
    bool reasoning = false;
    for (const Json& m : c["messages"])
      reasoning = reasoning || m.contains("reasoning_content") ||
                  m["content"].get<std::string>().find("</think>") != std::string::npos;
    for (LossOn loss_on : {LossOn::kAssistant, LossOn::kLastAssistant}) {
      RecordOptions options;
      options.loss_on = loss_on;
      options.date = c.value("date", "");
      if (c.contains("chat_template_kwargs"))
        options.template_kwargs = c["chat_template_kwargs"].dump();
      RecordTokenizer records(tokenizer, &chat, options);
      std::vector<uint32_t> tokens;
      RecordStats stats;
      const auto bad = records.tokenize(Json{{"messages", c["messages"]}}.dump(), tokens, stats);
      if (expected[i].contains("error")) {
        // Gemma's template refuses roles that do not alternate: a bad record, as in Hugging Face.
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->kind, "template refused");
        continue;
      }
      ASSERT_FALSE(bad) << bad->message;
      std::vector<uint32_t> ids;
      std::string counted;
      for (uint32_t token : tokens) {
        ids.push_back(formats::record_token_id(token));
        if (formats::record_token_counts(token))
          counted += tokenizer.token_text(formats::record_token_id(token));
      }
      EXPECT_EQ(ids, expected[i]["ids"].get<std::vector<uint32_t>>());

      if (family.think && reasoning) continue;  // records_template_test.cpp
      std::string answers;
      int last = -1, last_user = -1;
      for (size_t m = 0; m < c["messages"].size(); ++m) {
        if (c["messages"][m]["role"] == "assistant") last = static_cast<int>(m);
        if (c["messages"][m]["role"] == "user") last_user = static_cast<int>(m);
      }
      for (size_t m = 0; m < c["messages"].size(); ++m) {
        const Json& message = c["messages"][m];
        if (message["role"] != "assistant") continue;
        if (loss_on == LossOn::kLastAssistant && static_cast<int>(m) != last) continue;
        const std::string content = message["content"].get<std::string>();
        const bool after_think = family.think && static_cast<int>(m) > last_user;
        const std::string written = family.trims  ? trim(content)
                                    : after_think ? lstrip_newlines(content)
                                                  : content;
        // A token that overlaps a content counts (as Hugging Face's return_assistant_tokens_mask
        // counts it): Qwen's template writes "\n" just before the content, and its pre-tokenizer
        // (\s*[\r\n]+) joins that newline with a content's leading newlines into one token.
        // After Qwen3's "</think>\n\n" the content has no leading newline left.
        if (!family.trims && !written.empty() && written[0] == '\n') answers += "\n";
        answers += tokenizer.normalize(written) + family.end_of_turn;
      }
      EXPECT_EQ(counted, answers);
      EXPECT_EQ(stats.no_assistant, last < 0 ? 1 : 0);
      EXPECT_EQ(stats.empty_turns_uncounted, 0);
    }
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

INSTANTIATE_TEST_SUITE_P(Families, RealRecords,
                         ::testing::Values(Family{"llama3", true, "<|eot_id|>"},
                                           Family{"llama3_1", true, "<|eot_id|>"},
                                           Family{"llama3_2", true, "<|eot_id|>"},
                                           Family{"qwen2_5", false, "<|im_end|>"},
                                           Family{"qwen3", false, "<|im_end|>", true},
                                           Family{"gemma3", true, "<end_of_turn>"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pstar::text
