#include "pstar/generate/session.h"

#include <algorithm>
#include <filesystem>

#include <c10/core/ScalarType.h>
#include <torch/torch.h>

#include "model_source.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/clock.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/model/kv_cache.h"
#include "pstar/tier/device_tier.h"
#include "text_side.h"

namespace pstar::generate {

namespace fs = std::filesystem;
using internal::ModelSource;
using internal::TextSide;

namespace {

bool has_tokenizer(const std::string& dir) {
  return !dir.empty() &&
         (fs::exists(fs::path(dir) / "tokenizer.json") ||
          (fs::exists(fs::path(dir) / "vocab.json") && fs::exists(fs::path(dir) / "merges.txt")));
}

// --tokenizer, else the run's data.tokenizer, else the model's folder's; "" for a model that reads
// bytes (a run on data.text without data.tokenizer: a vocabulary of 256). ConfigError saying where
// it looked otherwise.
std::string find_tokenizer(const SessionOptions& o, const ModelSource& s) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  std::string looked;
  if (s.run) {
    if (!s.run->data.tokenizer.empty()) return s.run->data.tokenizer;
    looked = s.checkpoint_dir + "/config.json's data.tokenizer is empty";
  }
  if (has_tokenizer(s.folder)) return s.folder;
  if (!s.folder.empty())
    looked += (looked.empty() ? "" : "; ") + s.folder +
              " has no tokenizer.json (nor vocab.json and merges.txt)";
  const bool bytes = s.run && s.run->data.tokenizer.empty() && s.shape.vocab_size() == 256;
  if (bytes) return "";
  PSTAR_THROW(ConfigError, "no tokenizer for ", s.given, ": --tokenizer is not given; ", looked,
              " (checkpoints and merged folders carry no tokenizer: give --tokenizer with the "
              "model's tokenizer.json or its folder)");
}

c10::ScalarType parse_dtype(const std::string& name, c10::Device device) {
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kFloat16;
  PSTAR_CHECK(name == "auto", ConfigError, "--dtype ", name, ": expected fp32, bf16, fp16 or auto");
  return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
}

}  // namespace

struct Session::Impl {
  SessionOptions options;
  ModelSource source;
  std::unique_ptr<TextSide> text;
  std::vector<text::Prompt> prompts;
  std::vector<text::RenderedPrompt> rendered;
  std::vector<std::vector<int64_t>> ids;
  GenerateOptions generate;
  std::shared_ptr<model::CausalLM> model;

  void read_prompts();
  // The device the weights and cache fit on, and the dtype.
  std::pair<c10::Device, c10::ScalarType> place(int64_t slots) const;
};

void Session::Impl::read_prompts() {
  for (size_t i = 0; i < options.prompts.size(); ++i) {
    text::Prompt p;
    p.origin = "--prompt " + std::to_string(i + 1);
    if (options.chat)
      p.messages.push_back({"user", options.prompts[i], std::nullopt});
    else
      p.text = options.prompts[i];
    prompts.push_back(std::move(p));
  }
  if (!options.prompts_file.empty()) {
    auto more = text::read_prompt_file(options.prompts_file);
    prompts.insert(prompts.end(), more.begin(), more.end());
  }
  PSTAR_CHECK(!prompts.empty(), ConfigError,
              "no prompts: give --prompt TEXT (repeatable) or --prompts FILE.jsonl");
}

std::pair<c10::Device, c10::ScalarType> Session::Impl::place(int64_t slots) const {
  c10::Device device = core::resolve_device(options.device, "--device");
  c10::ScalarType dtype = parse_dtype(options.dtype, device);
  if (!device.is_cuda() || !tier::cuda_tier_built()) return {device, dtype};
  const model::ModelShape& shape = source.shape;
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t batch = std::min<int64_t>(options.batch_size, static_cast<int64_t>(ids.size()));
  const int64_t weights = shape.num_params() * element;
  int64_t cache = 0, scores = 0;
  if (shape.family == model::ModelFamily::kDecoder) {
    cache = model::KvCache::bytes(shape.decoder, batch, slots, generate.prefill_block, element);
    scores = 4 * batch * shape.decoder.heads * std::min(slots, generate.prefill_block) * slots;
  }
  const int64_t logits = 4 * batch * shape.vocab_size() * 2;
  const int64_t need = weights + cache + scores + logits;
  const int64_t free = tier::cuda_free_bytes(device.index());
  // A tenth of the free memory for LibTorch's workspaces and the layers' activations.
  if (need <= free - free / 10) {
    log::info("generate: on ", device.str(), ": weights ", format_bytes(weights), ", kv cache ",
              format_bytes(cache), " of ", format_bytes(free), " free");
    return {device, dtype};
  }
  log::warn("generate: the weights (", format_bytes(weights), ") and kv cache (",
            format_bytes(cache), " for ", batch, " prompts of up to ", slots,
            " positions) need more than the ", format_bytes(free), " free on ", device.str(),
            "; generating on the CPU instead (lower --batch-size or --max-new-tokens to fit)");
  return {c10::Device(c10::kCPU), options.dtype == "auto" ? torch::kFloat32 : dtype};
}

Session::Session(const SessionOptions& o) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = o;
  check_sampling_options(o.generate.sampling);
  PSTAR_CHECK(o.generate.max_new_tokens >= 1, ConfigError, "--max-new-tokens ",
              o.generate.max_new_tokens, ": expected at least 1");
  PSTAR_CHECK(o.batch_size >= 1, ConfigError, "--batch-size ", o.batch_size,
              ": expected at least 1");
  s.source = internal::find_model_source(o.model);
  const std::string tokenizer = find_tokenizer(o, s.source);
  const std::string template_path = s.source.run ? s.source.run->data.chat_template : "";
  const std::string kwargs = !o.chat_template_kwargs.empty() ? o.chat_template_kwargs
                             : s.source.run ? s.source.run->data.chat_template_kwargs
                                            : "";
  s.text = std::make_unique<TextSide>(internal::load_text_side(tokenizer, template_path, kwargs));
  log::info("generate: tokenizer ", s.text->tokenizer.description());
  PSTAR_CHECK(s.text->tokenizer.vocab_size() <= s.source.shape.vocab_size(), ConfigError,
              "the tokenizer (", tokenizer.empty() ? "bytes" : tokenizer, ") has ",
              s.text->tokenizer.vocab_size(), " ids but the model only ",
              s.source.shape.vocab_size(), "; is it the model's tokenizer?");
  s.read_prompts();
  // The context: the model's, or --max-length below it.
  const int64_t positions = internal::model_positions(s.source.shape);
  PSTAR_CHECK(o.max_length <= positions, ConfigError, "--max-length ", o.max_length,
              ": the model has ", positions, " positions (max_position_embeddings)");
  s.generate = o.generate;
  s.generate.context = o.max_length > 0 ? o.max_length : positions;
  int64_t longest = 0;
  for (const auto& p : s.prompts) {
    s.rendered.push_back(text::render_prompt(p, s.text->tokenizer, s.text->chat.get(),
                                             s.text->chat_options, s.text->no_template));
    const auto& ids = s.rendered.back().ids;
    const auto length = static_cast<int64_t>(ids.size());
    PSTAR_CHECK(length > 0, ConfigError, p.origin, " is empty: nothing to continue");
    const bool fits = length < s.generate.context;
    const bool limited = o.max_length > 0;
    PSTAR_CHECK(fits, ConfigError, p.origin, " is ", length,
                " tokens long, which leaves no room in the context of ", s.generate.context,
                " positions", limited ? " (--max-length)" : " (the model's)", "; shorten it",
                limited ? " or raise --max-length" : "");
    s.ids.emplace_back(ids.begin(), ids.end());
    longest = std::max(longest, length);
  }
  std::string why;
  s.generate.stop_ids = internal::stop_ids(*s.text, s.source.folder, &why);
  log::info("generate: stops at ", s.generate.stop_ids.size(), " token(s), from ", why);
  const int64_t slots = std::min(s.generate.context, longest + o.generate.max_new_tokens);
  const auto [device, dtype] = s.place(slots);
  s.model = internal::load_model(s.source, slots, dtype, device);
  log::info("generate: model ", s.source.shape.describe(), " on ", device.str(), " in ",
            c10::toString(dtype), ", context ", s.generate.context, " positions, ",
            s.prompts.size(), " prompt(s)");
}

Session::~Session() = default;

size_t Session::prompt_count() const { return impl_->prompts.size(); }

void Session::run(const std::function<void(const PromptResult&)>& on_result,
                  const std::function<void(const std::string&)>& on_text) {
  Impl& s = *impl_;
  const text::Tokenizer& tokenizer = s.text->tokenizer;
  const bool stream = on_text && s.ids.size() == 1;
  const auto batch = static_cast<size_t>(s.options.batch_size);
  for (size_t begin = 0; begin < s.ids.size(); begin += batch) {
    const size_t end = std::min(s.ids.size(), begin + batch);
    const std::vector<std::vector<int64_t>> rows(s.ids.begin() + static_cast<ptrdiff_t>(begin),
                                                 s.ids.begin() + static_cast<ptrdiff_t>(end));
    text::StreamDecoder decoder(tokenizer, s.options.skip_special);
    GenerateHooks hooks;
    if (stream)
      hooks.on_token = [&](int64_t, int64_t id) {
        const std::string piece = decoder.feed(static_cast<uint32_t>(id));
        if (!piece.empty()) on_text(piece);
      };
    const auto started = core::Clock::now();
    const std::vector<Completion> out = generate(*s.model, rows, s.generate, hooks);
    const double seconds = core::seconds_since(started);
    if (stream) on_text(decoder.finish());
    for (size_t r = 0; r < out.size(); ++r) {
      PromptResult result;
      result.index = begin + r;
      result.origin = s.prompts[result.index].origin;
      result.prompt = s.rendered[result.index].text;
      result.prompt_ids = rows[r];
      result.ids = out[r];
      const std::vector<uint32_t> ids(out[r].ids.begin(), out[r].ids.end());
      result.completion = tokenizer.decode(ids, s.options.skip_special);
      const auto drawn = out[r].ids.size() + (out[r].reason == StopReason::kStopToken ? 1 : 0);
      result.tokens_per_s = seconds > 0 ? static_cast<double>(drawn) / seconds : 0;
      on_result(result);
    }
  }
}

}  // namespace pstar::generate
