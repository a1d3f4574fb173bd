// The prompts `pstar generate` builds from conversations (text/prompts.h): rendered with the real
// chat templates of Llama 3, 3.1, 3.2, Qwen2.5, Qwen3 and Gemma 3 and their generation prompt, the
// ids equal those of @huggingface/jinja's rendering with add_generation_prompt, tokenized by the
// models' own JavaScript encoders (scripts/fetch-tokenizer-data.sh, the conversations of
// tests/data/chat/conversations.json that ask for the prompt); and each template's end-of-turn
// token, where generation stops.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/text/chat_template.h"
#include "pstar/text/prompts.h"
#include "pstar/text/tokenizer.h"
#include "pstar_test_paths.h"
#include "text/tokenizer_data.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Case {
  const char* family;
  const char* end_of_turn;  // what the template writes after an assistant's content
};

class RealPrompts : public ::testing::TestWithParam<Case> {};

TEST_P(RealPrompts, ConversationsBecomeHuggingFacesIdsWithTheGenerationPrompt) {
  const Case c = GetParam();
  const fs::path reference = fs::path(testing::tokenizer_data_dir()) / "reference" / "chat" /
                             (std::string(c.family) + ".json");
  if (!fs::exists(reference))
    GTEST_SKIP() << "no chat reference at " << reference
                 << ": run scripts/fetch-tokenizer-data.sh (needs node and npm)";
  const fs::path folder = fs::path(testing::tokenizer_data_dir()) / "chat" / c.family;
  const ChatTemplate chat = ChatTemplate::load(folder.string());
  const Tokenizer& tokenizer = testing::family_tokenizer(c.family);
  const Json cases = testing::read_json(PSTAR_SOURCE_DIR "/tests/data/chat/conversations.json");
  const Json expected = testing::read_json(reference);
  ASSERT_EQ(cases.size(), expected.size()) << "stale reference: rerun the fetch script";
  int compared = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& conversation = cases[i];
    if (!conversation.value("add_generation_prompt", false) || expected[i].contains("error"))
      continue;
    SCOPED_TRACE(conversation["name"].get<std::string>());
    Prompt prompt;
    prompt.origin = conversation["name"].get<std::string>();
    for (const Json& m : conversation["messages"])
      prompt.messages.push_back(
          {m["role"].get<std::string>(), m["content"].get<std::string>(), std::nullopt});
    ChatOptions options;  // add_generation_prompt is render_prompt's own
    options.date = conversation.value("date", "");
    if (conversation.contains("chat_template_kwargs"))
      options.template_kwargs = conversation["chat_template_kwargs"].dump();
    const RenderedPrompt r = render_prompt(prompt, tokenizer, &chat, options);
    EXPECT_EQ(r.text, expected[i]["text"].get<std::string>());
    EXPECT_EQ(r.ids, expected[i]["ids"].get<std::vector<uint32_t>>());
    ++compared;
  }
  EXPECT_GE(compared, 3)
      << "the generation prompt's conversations (Qwen3's enable_thinking on and off)";
  EXPECT_EQ(end_of_turn_id(chat, tokenizer, {}), tokenizer.token_id(c.end_of_turn));
}

INSTANTIATE_TEST_SUITE_P(
    Families, RealPrompts,
    ::testing::Values(Case{"llama3", "<|eot_id|>"}, Case{"llama3_1", "<|eot_id|>"},
                      Case{"llama3_2", "<|eot_id|>"}, Case{"qwen2_5", "<|im_end|>"},
                      Case{"qwen3", "<|im_end|>"}, Case{"gemma3", "<end_of_turn>"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.family); });

}  // namespace
}  // namespace pstar::text
