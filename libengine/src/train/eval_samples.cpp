#include "eval_samples.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "../generate/text_side.h"
#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/model/causal_lm.h"
#include "pstar/model/hooks.h"
#include "trainer_impl.h"

namespace pstar::train {

EvalSamples::EvalSamples(const config::TrainConfig& config, model::CausalLM& model) {
  const config::DataConfig& data = config.data;
  PSTAR_CHECK(!data.tokenizer.empty() || !data.text.empty(), ConfigError,
              "training.eval_samples: the run reads token ids (data.path) and has no "
              "data.tokenizer to turn the samples' text into ids and back; set data.tokenizer");
  text_ = std::make_unique<generate::internal::TextSide>(generate::internal::load_text_side(
      data.tokenizer, data.chat_template, data.chat_template_kwargs));
  options_.max_new_tokens = config.training.eval_sample_tokens;
  options_.fixed_steps = true;
  options_.context = generate::context_limit(model);
  const std::string folder =
      formats::is_directory(config.model.init_from) ? config.model.init_from : "";
  std::string why;
  options_.stop_ids = generate::internal::stop_ids(*text_, folder, &why);
  for (size_t i = 0; i < config.training.eval_samples.size(); ++i) {
    const std::string where = "training.eval_samples[" + std::to_string(i) + "]";
    text::Prompt prompt = text::parse_prompt(config.training.eval_samples[i], where);
    const text::RenderedPrompt r = text::render_prompt(prompt, text_->tokenizer, text_->chat.get(),
                                                       text_->chat_options, text_->no_template);
    const auto length = static_cast<int64_t>(r.ids.size());
    PSTAR_CHECK(length > 0 && length < options_.context, ConfigError, where, " is ", length,
                " tokens long; the model's context holds ", options_.context,
                " positions, and a sample needs at least one of them for its completion");
    prompts_.push_back(r.text);
    ids_.emplace_back(r.ids.begin(), r.ids.end());
  }
  log::info("samples: ", ids_.size(), " prompt(s), ", options_.max_new_tokens,
            " greedy tokens each at every evaluation, stopping at ", why);
}

EvalSamples::~EvalSamples() = default;

std::vector<SampleText> EvalSamples::complete(model::CausalLM& model, c10::Device device) const {
  generate::GenerateOptions options = options_;
  options.device = device;
  const auto out = generate::generate(model, ids_, options);
  std::vector<SampleText> texts;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::vector<uint32_t> ids(out[i].ids.begin(), out[i].ids.end());
    texts.push_back({prompts_[i], text_->tokenizer.decode(ids)});
  }
  return texts;
}

bool Trainer::Impl::samples_due() const {
  if (!metrics.samples) return false;
  const int64_t interval = config.training.eval_interval;
  return step == config.training.steps || (interval > 0 && step % interval == 0);
}

// As evaluate() (Note [evaluation] in engine/chunked_engine.h): autograd off, eval mode, the
// engine's evaluation hooks, and the CPU generator put back, so that training goes on as if the
// samples had not been taken.
std::vector<SampleText> Trainer::Impl::sample() {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const at::Tensor rng = generator.get_state();
  std::vector<SampleText> texts;
  engine->begin_eval();
  {
    model::ScopedModuleHooks hooks(engine->eval_hooks());
    texts = metrics.samples->complete(*model, device);
  }
  engine->end_eval();
  generator.set_state(rng);
  model->train(was_training);
  for (size_t i = 0; i < texts.size(); ++i)
    log::info("sample ", i, ": ", texts[i].completion.substr(0, 120));
  return texts;
}

}  // namespace pstar::train
