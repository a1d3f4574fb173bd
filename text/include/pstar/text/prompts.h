// Prompts to generate from (`pstar generate`, training.eval_samples): strings, or conversations
// rendered with the model's chat template and its prompt for the assistant's turn, turned into ids
// as training turns data.jsonl's records into ids (Note [record masks] in records.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pstar/text/chat_template.h"
#include "pstar/text/tokenizer.h"

namespace pstar::text {

struct Prompt {
  std::string text;                   // a prompt string; or, with messages, unused
  std::vector<ChatMessage> messages;  // a conversation (empty: the prompt is `text`)
  std::string origin;                 // names it in errors: "--prompt 2", "FILE line 3"
};

// One prompt from a JSON object's text in data.jsonl's shapes ({"messages": [...]} or
// {"prompt": ...}); FormatError naming `origin` and the field otherwise.
Prompt parse_prompt(std::string_view json, const std::string& origin);

// The prompts of a JSON Lines file in data.jsonl's shapes: {"messages": [...]} (a conversation;
// a last assistant turn stays, the template's generation prompt follows it) or {"prompt": ...}
// (a "completion" beside it is ignored). Blank lines are skipped. FormatError naming the file, the
// 1-based line and the field for anything else; IoError when it cannot be read.
std::vector<Prompt> read_prompt_file(const std::string& path);

// A prompt as the model sees it: its text (the string, or the rendered conversation) and ids.
struct RenderedPrompt {
  std::string text;
  std::vector<uint32_t> ids;
};

// The ids of `prompt`: a string after the token the tokenizer's post-processor puts first
// (Tokenizer::prefix_id), as a prompt/completion record starts; a conversation rendered by `chat`
// with add_generation_prompt (and `options`' date and kwargs) and the whole text tokenized.
// ConfigError naming the prompt when it is a conversation and `chat` is null (`no_template` says
// why there is none); FormatError when the template refuses it.
RenderedPrompt render_prompt(const Prompt& prompt, const Tokenizer& tokenizer,
                             const ChatTemplate* chat, ChatOptions options,
                             const std::string& no_template = "");

// The special token a template writes right after an assistant's content (Llama 3's <|eot_id|>,
// ChatML's <|im_end|>, Gemma's <end_of_turn>): found by rendering a two-turn conversation; nullopt
// when the template writes none there, or refuses the conversation.
std::optional<uint32_t> end_of_turn_id(const ChatTemplate& chat, const Tokenizer& tokenizer,
                                       const ChatOptions& options);

}  // namespace pstar::text
