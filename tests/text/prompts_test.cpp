// Prompt files and prompt strings (text/prompts.h) on a small tokenizer: the shapes a line may
// have, the errors naming the file and line, and a string's leading special token.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/text/prompts.h"
#include "pstar/text/tokenizer.h"
#include "test_util.h"

namespace pstar::text {
namespace {

std::string error_of(const std::string& path) {
  try {
    read_prompt_file(path);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(Prompts, AFileHoldsConversationsAndPromptStrings) {
  pstar::testing::ScratchDir dir;
  const std::string path = dir.file("prompts.jsonl");
  pstar::testing::write_text(
      path,
      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n\n"
      "{\"prompt\": \"Once\", \"completion\": \"ignored\"}\n{\"prompt\": \"upon\"}\n");
  const auto prompts = read_prompt_file(path);
  ASSERT_EQ(prompts.size(), 3U);
  EXPECT_EQ(prompts[0].messages.size(), 1U);
  EXPECT_EQ(prompts[0].messages[0].content, "Hi");
  EXPECT_EQ(prompts[1].text, "Once");
  EXPECT_TRUE(prompts[1].messages.empty());
  EXPECT_EQ(prompts[2].origin, path + " line 4");

  pstar::testing::write_text(path, "{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n");
  EXPECT_NE(error_of(path).find("line 2: a {\"text\"} record is not a prompt"), std::string::npos)
      << error_of(path);
  pstar::testing::write_text(path,
                             "{\"prompt\": \"a\"}\n{\"messages\": [{\"role\": \"robot\"}]}\n");
  EXPECT_NE(error_of(path).find("line 2: messages[0]"), std::string::npos) << error_of(path);
  pstar::testing::write_text(path, "not json\n");
  EXPECT_NE(error_of(path).find("line 1: not JSON"), std::string::npos) << error_of(path);
}

TEST(Prompts, AStringStartsWithThePostProcessorsTokenAndAConversationNeedsATemplate) {
  // Bytes: no post-processor token; the ids are the text's bytes.
  const Tokenizer bytes = Tokenizer::bytes();
  Prompt p;
  p.text = "Hi!";
  p.origin = "--prompt 1";
  EXPECT_EQ(render_prompt(p, bytes, nullptr, {}).ids, (std::vector<uint32_t>{'H', 'i', '!'}));
  EXPECT_EQ(bytes.decode({0xE2, 0x82, 0xAC}), "\xE2\x82\xAC");
  p.messages.push_back({"user", "Hi", std::nullopt});
  try {
    render_prompt(p, bytes, nullptr, {}, "no tokenizer_config.json beside it");
    ADD_FAILURE() << "a conversation without a template";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--prompt 1 is a conversation"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("no tokenizer_config.json beside it"), std::string::npos);
  }
}

}  // namespace
}  // namespace pstar::text
