// One JSON Lines record read into its shape (private to pstar_text): Note [record masks] in
// pstar/text/records.h says what the shapes are and what makes a record bad.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pstar/text/chat_template.h"
#include "pstar/text/records.h"

namespace pstar::text::records {

enum class Shape { kMessages, kPair, kText };

struct ParsedRecord {
  Shape shape = Shape::kText;
  std::vector<ChatMessage> messages;  // kMessages
  std::string prompt, completion;     // kPair
  std::string text;                   // kText
};

// Whether the line holds nothing but whitespace (not a record).
bool is_blank(std::string_view line);

// The record on `line`, or why it is bad (the message names the field, not the file or line).
// `prompt_only`: a {"prompt"} without a completion is a pair too (prompts to generate from,
// text/prompts.h).
std::optional<BadRecord> parse_record(std::string_view line, ParsedRecord& out,
                                      bool prompt_only = false);

}  // namespace pstar::text::records
