// The text side of generation (private to libengine): a tokenizer, a chat template, the prompts'
// ids and the stop tokens, shared by `pstar generate` (session.cpp) and training.eval_samples
// (train/eval_samples.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pstar/text/chat_template.h"
#include "pstar/text/prompts.h"
#include "pstar/text/tokenizer.h"

namespace pstar::generate::internal {

struct TextSide {
  text::Tokenizer tokenizer;
  std::unique_ptr<text::ChatTemplate> chat;  // null: none (no_template says why)
  std::string no_template;
  text::ChatOptions chat_options;  // the template's kwargs
};

// The tokenizer at `tokenizer_path` ("": bytes, text::Tokenizer::bytes()) and the chat template of
// `template_path` ("": the tokenizer_config.json beside the tokenizer, when there is one), with
// `template_kwargs` (a JSON object's text, or "").
TextSide load_text_side(const std::string& tokenizer_path, const std::string& template_path,
                        const std::string& template_kwargs);

// Where generation stops: generation_config.json's eos_token_id in `folder` where it has one, else
// the tokenizer's end-of-text and the template's end-of-turn tokens. `why` says which, for the log.
std::vector<int64_t> stop_ids(const TextSide& side, const std::string& folder, std::string* why);

}  // namespace pstar::generate::internal
