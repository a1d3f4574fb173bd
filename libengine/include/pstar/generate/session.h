// `pstar generate` on the engine's side (docs/cli.md#pstar-generate): a model from a checkpoint
// (any number of ranks, read as merge-ckpt reads it) or a Hugging Face folder, loaded through the
// model code the trainer uses onto the device when its weights and cache fit there; its tokenizer
// and chat template; prompts; stop tokens; completions as text.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pstar/generate/generator.h"

namespace pstar::generate {

// What the command asks for; "" or 0 is "the model's own" where a field says so.
struct SessionOptions {
  // A checkpoint (a step directory, or a training.save_dir: its newest) or a Hugging Face folder.
  std::string model;
  // A tokenizer.json or a folder holding one; "": the folder's own, or the run's data.tokenizer.
  std::string tokenizer;
  std::vector<std::string> prompts;  // --prompt: prompt strings, or user turns with `chat`
  std::string prompts_file;          // --prompts FILE.jsonl (text/prompts.h)
  bool chat = false;                 // each --prompt as a user's message through the template
  // The template's keyword arguments, a JSON object ({"enable_thinking": false}); "": the run's
  // data.chat_template_kwargs for a checkpoint, none for a folder.
  std::string chat_template_kwargs;
  // max_new_tokens, sampling, use_cache, prefill_block; context and stop_ids are the session's.
  GenerateOptions generate;
  int64_t max_length = 0;  // the context: 0 the model's max_position_embeddings (GPT: n_positions)
  std::string device = "auto";  // cpu | cuda | auto
  std::string dtype = "auto";   // fp32 | bf16 | fp16 | auto (bf16 on a GPU, fp32 on the CPU)
  int64_t batch_size = 8;       // prompts generated together
  bool skip_special = false;    // leave special tokens out of the completions' text
};

struct PromptResult {
  size_t index = 0;    // of the prompt, in the order given
  std::string origin;  // "--prompt 1", "FILE line 3"
  std::string prompt;  // the prompt string, or the rendered conversation
  std::vector<int64_t> prompt_ids;
  std::string completion;  // the text of completion.ids
  Completion ids;
  double tokens_per_s = 0;  // the row's tokens over its batch's time (prompt included)
};

class Session {
 public:
  // Finds and loads everything and checks every prompt against the context before any
  // generation. ConfigError / FormatError / IoError naming the flag, file or value: a MODEL that
  // is neither kind, a checkpoint with missing or damaged files, no tokenizer to be found (saying
  // where it looked), a conversation without a chat template, a prompt longer than the context,
  // sampling options out of range.
  explicit Session(const SessionOptions& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  size_t prompt_count() const;
  // Generates every prompt, `batch_size` at a time, handing each result over as its batch ends.
  // With `on_text` and a single prompt, its completion's text is handed over as it is generated
  // (text::StreamDecoder: never a part of a character) and the result after.
  void run(const std::function<void(const PromptResult&)>& on_result,
           const std::function<void(const std::string&)>& on_text = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstar::generate
