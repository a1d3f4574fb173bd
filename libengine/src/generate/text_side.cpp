#include "text_side.h"

#include <algorithm>

#include "model_source.h"
#include "pstar/text/records.h"

namespace pstar::generate::internal {

TextSide load_text_side(const std::string& tokenizer_path, const std::string& template_path,
                        const std::string& template_kwargs) {
  TextSide side{
      tokenizer_path.empty() ? text::Tokenizer::bytes() : text::Tokenizer::load(tokenizer_path),
      nullptr,
      "",
      {}};
  side.chat_options.template_kwargs = template_kwargs;
  if (tokenizer_path.empty() && template_path.empty()) {
    side.no_template = "the model reads bytes, with no tokenizer and no chat template";
    return side;
  }
  side.chat = text::load_record_template(tokenizer_path, template_path, &side.no_template);
  return side;
}

std::vector<int64_t> stop_ids(const TextSide& side, const std::string& folder, std::string* why) {
  std::vector<int64_t> ids = generation_config_stops(folder);
  if (!ids.empty()) {
    *why = folder + "/generation_config.json's eos_token_id";
    return ids;
  }
  std::vector<std::string> from;
  if (auto eos = side.tokenizer.eos_id()) {
    ids.push_back(*eos);
    from.push_back("the tokenizer's end of text");
  }
  if (side.chat) {
    if (auto eot = text::end_of_turn_id(*side.chat, side.tokenizer, side.chat_options)) {
      if (std::find(ids.begin(), ids.end(), *eot) == ids.end()) ids.push_back(*eot);
      from.push_back("the chat template's end of turn");
    }
  }
  *why = from.empty() ? "none (no generation_config.json, no end-of-text or end-of-turn token)"
         : from.size() == 1 ? from[0]
                            : from[0] + " and " + from[1];
  return ids;
}

}  // namespace pstar::generate::internal
