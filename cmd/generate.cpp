// `pstar generate MODEL`: completions of prompts by a checkpoint or a Hugging Face folder
// (docs/cli.md#pstar-generate). The engine does the work (generate/session.h); this file turns the
// flags into its options and prints or writes what it returns.
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/generate/session.h"

namespace pstar::cmd {

void register_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "generate",
      "Complete prompts with a checkpoint or a Hugging Face model folder (see docs/cli.md)");
  sub->add_option("model", o->model,
                  "A checkpoint (a step directory, or a training.save_dir: its newest) or a "
                  "Hugging Face model folder")
      ->required();
  sub->add_option("--tokenizer", o->tokenizer,
                  "A tokenizer.json or a folder holding one (default: the model folder's, or the "
                  "run's data.tokenizer)");
  sub->add_option("--prompt", o->prompts, "A prompt string; repeatable")->allow_extra_args(false);
  sub->add_option("--prompts", o->prompts_file,
                  "A JSON Lines file of prompts: {\"messages\": [...]} conversations (through the "
                  "chat template, with its generation prompt) or {\"prompt\": ...} strings");
  sub->add_flag("--chat", o->chat,
                "Each --prompt as a user's message through the model's chat template");
  sub->add_option("--chat-template-kwargs", o->chat_template_kwargs,
                  "The template's keyword arguments as a JSON object, e.g. "
                  "'{\"enable_thinking\": false}' (default: the run's data.chat_template_kwargs)");
  sub->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate at most a prompt")
      ->capture_default_str();
  sub->add_option("--max-length", o->max_length,
                  "The context a prompt and its completion share (default: the model's "
                  "max_position_embeddings)");
  sub->add_option("--temperature", o->temperature, "0: greedy; above 0: sampled")
      ->capture_default_str();
  sub->add_option("--top-p", o->top_p,
                  "Sample from the most likely tokens whose probabilities "
                  "reach this, in (0, 1]")
      ->capture_default_str();
  sub->add_option("--top-k", o->top_k, "Sample from this many most likely tokens; 0: all")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Of the samples: the same seed repeats them")
      ->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "Prompts generated together")
      ->capture_default_str();
  sub->add_option("--device", o->device, "Compute device")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "Weights and activations (auto: bf16 on a GPU, else fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "auto"}))
      ->capture_default_str();
  sub->add_flag("--skip-special-tokens", o->skip_special,
                "Leave special tokens out of the completions' text");
  sub->add_flag("--no-cache", o->no_cache,
                "Run every step over the whole sequence instead of keeping keys and values "
                "(slower; for checking)");
  sub->add_option("-o,--output", o->output,
                  "Write one JSON object a prompt here (JSON Lines) instead of printing");
  sub->add_flag("-q,--quiet", o->quiet, "Only warnings, errors and the completions");
  sub->callback([o] { run_generate(*o); });
}

int run_generate(const GenerateCommandOptions& o) {
  if (o.quiet) log::set_level(log::Level::kWarn);
  core::configure_runtime();
  generate::SessionOptions s;
  s.model = o.model;
  s.tokenizer = o.tokenizer;
  s.prompts = o.prompts;
  s.prompts_file = o.prompts_file;
  s.chat = o.chat;
  s.chat_template_kwargs = o.chat_template_kwargs;
  s.generate.max_new_tokens = o.max_new_tokens;
  s.generate.sampling.temperature = o.temperature;
  s.generate.sampling.top_p = o.top_p;
  s.generate.sampling.top_k = o.top_k;
  s.generate.sampling.seed = o.seed;
  s.generate.use_cache = !o.no_cache;
  s.max_length = o.max_length;
  s.device = o.device;
  s.dtype = o.dtype;
  s.batch_size = o.batch_size;
  s.skip_special = o.skip_special;
  // The output first, so that a path that cannot be written fails before the model loads.
  std::ofstream out;
  if (!o.output.empty()) {
    out.open(o.output, std::ios::binary | std::ios::trunc);
    PSTAR_CHECK(out.good(), IoError, "-o ", o.output, ": cannot be written");
  }
  generate::Session session(s);
  int64_t tokens = 0;
  auto on_result = [&](const generate::PromptResult& r) {
    tokens += static_cast<int64_t>(r.ids.ids.size());
    if (out.is_open()) {
      nlohmann::ordered_json line = {{"prompt", r.prompt},
                                     {"origin", r.origin},
                                     {"prompt_ids", r.prompt_ids},
                                     {"completion", r.completion},
                                     {"completion_ids", r.ids.ids},
                                     {"stop_reason", generate::stop_reason_name(r.ids.reason)},
                                     {"tokens_per_s", r.tokens_per_s}};
      if (r.ids.reason == generate::StopReason::kStopToken) line["stop_token"] = r.ids.stop_id;
      out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      out.flush();
    } else if (session.prompt_count() > 1) {
      std::printf("--- %s (%s)\n%s\n", r.origin.c_str(), generate::stop_reason_name(r.ids.reason),
                  r.completion.c_str());
    } else {
      std::printf("\n");
    }
    std::fflush(stdout);
  };
  auto on_text = [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  session.run(on_result,
              out.is_open() ? nullptr : std::function<void(const std::string&)>(on_text));
  PSTAR_CHECK(!out.is_open() || out.good(), IoError, "-o ", o.output, ": writing failed");
  log::info("generate: ", session.prompt_count(), " prompt(s), ", tokens, " tokens",
            !o.output.empty() ? " written to " + o.output : std::string());
  return 0;
}

}  // namespace pstar::cmd
