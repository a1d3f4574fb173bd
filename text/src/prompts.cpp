#include "pstar/text/prompts.h"

#include <string_view>

#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"
#include "records/parse.h"

namespace pstar::text {

Prompt parse_prompt(std::string_view json, const std::string& origin) {
  records::ParsedRecord record;
  const auto bad = records::parse_record(json, record, /*prompt_only=*/true);
  PSTAR_CHECK(!bad, FormatError, origin, ": ", bad ? bad->message : "");
  PSTAR_CHECK(record.shape != records::Shape::kText, FormatError, origin,
              ": a {\"text\"} record is not a prompt; give {\"messages\": [...]} or "
              "{\"prompt\": ...}");
  Prompt p;
  p.origin = origin;
  if (record.shape == records::Shape::kMessages)
    p.messages = std::move(record.messages);
  else
    p.text = std::move(record.prompt);
  return p;
}

std::vector<Prompt> read_prompt_file(const std::string& path) {
  const formats::MappedFile file(path);
  const std::string_view all(reinterpret_cast<const char*>(file.data()), file.size());
  std::vector<Prompt> out;
  size_t line_no = 0;
  for (size_t pos = 0; pos < all.size();) {
    size_t eol = all.find('\n', pos);
    if (eol == std::string_view::npos) eol = all.size();
    const std::string_view line = all.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (records::is_blank(line)) continue;
    out.push_back(parse_prompt(line, path + " line " + std::to_string(line_no)));
  }
  return out;
}

RenderedPrompt render_prompt(const Prompt& prompt, const Tokenizer& tokenizer,
                             const ChatTemplate* chat, ChatOptions options,
                             const std::string& no_template) {
  RenderedPrompt out;
  if (prompt.messages.empty()) {
    out.text = prompt.text;
    if (auto prefix = tokenizer.prefix_id()) out.ids.push_back(*prefix);
    const auto ids = tokenizer.encode(prompt.text);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    return out;
  }
  PSTAR_CHECK(chat != nullptr, ConfigError, prompt.origin,
              " is a conversation, which needs the model's chat template, but there is none: ",
              no_template);
  options.add_generation_prompt = true;
  out.text = chat->render(prompt.messages, options).text;
  out.ids = tokenizer.encode(out.text);
  return out;
}

std::optional<uint32_t> end_of_turn_id(const ChatTemplate& chat, const Tokenizer& tokenizer,
                                       const ChatOptions& options) {
  const std::vector<ChatMessage> turns = {{"user", "Hello.", std::nullopt},
                                          {"assistant", "Hi.", std::nullopt}};
  RenderedChat rendered;
  try {
    ChatOptions plain = options;
    plain.add_generation_prompt = false;
    rendered = chat.render(turns, plain);
  } catch (const Error&) {
    return std::nullopt;
  }
  size_t end = 0;
  for (const auto& span : rendered.spans)
    if (span.message == 1) end = span.end;
  if (end == 0) return std::nullopt;
  const auto after = tokenizer.encode(std::string_view(rendered.text).substr(end));
  if (after.empty() || !tokenizer.is_special(after.front())) return std::nullopt;
  return after.front();
}

}  // namespace pstar::text
