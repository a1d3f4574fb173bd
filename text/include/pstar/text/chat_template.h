// A model's chat template: conversations rendered to text exactly as Hugging Face's
// `tokenizer.apply_chat_template(messages, tokenize=False)` renders them.
//
// Note [chat templates]
// Templates are Jinja programs stored in tokenizer_config.json. pstar runs them with its own
// interpreter of the part of Jinja that chat templates use (src/jinja/: if/elif/else, for with
// loop.*, break/continue, set (also on a namespace), set blocks, Hugging Face's
// {% generation %}; Python's operators, literals, slices and str/dict methods; the filters,
// tests and globals listed in text/README.md), under apply_chat_template's settings:
// trim_blocks and lstrip_blocks, raise_exception(), strftime_now(), and Hugging Face's tojson.
// Anything outside that part (macros, includes, an unknown filter) is a FormatError naming the
// template, the line and what is missing: never a silently different text.
// The rendered text carries, byte by byte, which message's content it came from (Note [string
// origins] in src/jinja/value.h), so that a loss mask can be taken on the ids of the whole
// conversation whatever markup the template adds. The references are Hugging Face's own
// renderer (@huggingface/jinja) on the real tokenizer_config.json files
// (scripts/fetch-tokenizer-data.sh; tests/text/chat_template_test.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pstar::text {

namespace jinja {
struct Program;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", or what the template knows
  std::string content;
  // An assistant turn's reasoning kept apart from its content, as `message.reasoning_content`
  // (Qwen3's template writes it in a <think> block); absent: the variable is undefined. Its bytes
  // are the message's own, like the content's (Note [string origins]).
  std::optional<std::string> reasoning_content = std::nullopt;
};

struct ChatOptions {
  // Append the template's prompt for the next assistant turn (add_generation_prompt).
  bool add_generation_prompt = false;
  // The date strftime_now() gives, as YYYY-MM-DD. Empty: strftime_now is not defined, so Llama
  // 3.1/3.2's templates write their own default date (26 Jul 2024) and the text does not depend
  // on the day a run starts.
  std::string date;
  // Further variables for the template, as apply_chat_template's keyword arguments
  // (data.chat_template_kwargs, e.g. {"enable_thinking": false} for Qwen3): the text of a JSON
  // object, or "" for none. A name the renderer sets itself (messages, bos_token, ...) is a
  // FormatError.
  std::string template_kwargs;
};

// The rendered text, and the byte ranges of it that are a message's content (ranges of one
// message may be several where the template cut or repeated it).
struct RenderedChat {
  struct Span {
    size_t begin = 0;
    size_t end = 0;
    int message = 0;  // index into the messages rendered
  };
  std::string text;
  std::vector<Span> spans;
};

class ChatTemplate {
 public:
  // The chat_template of a tokenizer_config.json, of the one beside a tokenizer.json, or of the
  // one in a folder; with its bos_token and eos_token. A config whose chat_template is a list of
  // named templates gives the one named "default". Throws IoError when no file is there,
  // FormatError when it has no chat_template or the template cannot be parsed (naming the file
  // and the line).
  static ChatTemplate load(const std::string& path);
  // A template from its source; `origin` names it in errors.
  static ChatTemplate parse(const std::string& source, const std::string& origin,
                            const std::string& bos_token, const std::string& eos_token);

  // Renders `messages`. Throws FormatError naming the template and line when the template
  // rejects the conversation (its raise_exception(), with the template's own message) or cannot
  // evaluate something.
  RenderedChat render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;

  const std::string& origin() const { return origin_; }
  // The template's Jinja source (what a cache of rendered records is keyed by).
  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  std::shared_ptr<const jinja::Program> program_;
  std::string origin_, source_, bos_, eos_;
};

}  // namespace pstar::text
