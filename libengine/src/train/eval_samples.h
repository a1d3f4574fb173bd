// training.eval_samples (docs/training.md#samples): a few fixed prompts whose greedy completions
// the metrics file shows at each evaluation, so that a run shows what the model says as it trains.
// Private to src/train.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "pstar/formats/config.h"
#include "pstar/generate/generator.h"
#include "pstar/train/metrics.h"

namespace pstar::model {
class CausalLM;
}

namespace pstar::generate::internal {
struct TextSide;
}

namespace pstar::train {

class EvalSamples {
 public:
  // Reads the prompts and turns them into ids with the run's tokenizer (data.tokenizer; bytes for
  // data.text without one) and chat template. ConfigError naming training.eval_samples[i] for a
  // prompt that is not one, or leaves no room in the model's context, and when the run has no
  // tokenizer to read text with (data.path without data.tokenizer).
  EvalSamples(const config::TrainConfig& config, model::CausalLM& model);
  ~EvalSamples();

  // The greedy completions now: every rank runs the same forwards (generate's fixed_steps), on
  // `device`, with whatever hooks the caller has installed.
  std::vector<SampleText> complete(model::CausalLM& model, c10::Device device) const;

 private:
  std::unique_ptr<generate::internal::TextSide> text_;
  std::vector<std::string> prompts_;  // as the model sees them
  std::vector<std::vector<int64_t>> ids_;
  generate::GenerateOptions options_;
};

}  // namespace pstar::train
