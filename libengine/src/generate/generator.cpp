#include "pstar/generate/generator.h"

#include <algorithm>
#include <memory>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/model/causal_lm.h"
#include "pstar/model/decoder.h"
#include "pstar/model/kv_cache.h"

namespace pstar::generate {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kStopToken:
      return "stop_token";
    case StopReason::kMaxNewTokens:
      return "max_new_tokens";
    case StopReason::kContext:
      return "context";
  }
  return "?";
}

int64_t context_limit(model::CausalLM& model) {
  if (auto* decoder = dynamic_cast<model::Decoder*>(&model)) return decoder->config().max_positions;
  return model.max_seq_len();
}

namespace {

c10::Device device_of(model::CausalLM& model) {
  const auto params = model.parameters();
  return params.empty() ? c10::Device(c10::kCPU) : params.front().device();
}

// The logits of each row's last slot, one way or another: a decoder with its cache, or a forward
// over each row's whole sequence so far.
class Stepper {
 public:
  virtual ~Stepper() = default;
  // The padded prompts [batch, slots] on the CPU; returns the logits of their last slots.
  virtual at::Tensor prefill(const at::Tensor& ids) = 0;
  // One more slot a row, [batch] ids on the CPU.
  virtual at::Tensor step(const at::Tensor& ids) = 0;
};

class CachedStepper : public Stepper {
 public:
  CachedStepper(model::Decoder& model, const at::Tensor& padding, int64_t capacity, int64_t block,
                c10::Device device)
      : model_(model), device_(device), block_(block) {
    cache_ = std::make_unique<model::KvCache>(model.config(), padding.to(device), capacity);
  }
  at::Tensor prefill(const at::Tensor& ids) override {
    at::Tensor logits;
    for (int64_t at = 0; at < ids.size(1); at += block_)
      logits = model_.forward_cached(
          ids.narrow(1, at, std::min(block_, ids.size(1) - at)).to(device_), *cache_);
    return logits;
  }
  at::Tensor step(const at::Tensor& ids) override {
    return model_.forward_cached(ids.view({-1, 1}).to(device_), *cache_);
  }

 private:
  model::Decoder& model_;
  c10::Device device_;
  int64_t block_;
  std::unique_ptr<model::KvCache> cache_;
};

// Note [packed attention] does the padding's work: padding slots are a segment of their own, the
// real ones another, at positions from 0. A model that cannot take records has no way to skip the
// padding, so its rows go one at a time (padding is then never needed: each row is its own batch).
class FullStepper : public Stepper {
 public:
  FullStepper(model::CausalLM& model, const at::Tensor& padding, c10::Device device)
      : model_(model), padding_(padding), device_(device) {}
  at::Tensor prefill(const at::Tensor& ids) override {
    ids_ = ids;
    return logits();
  }
  at::Tensor step(const at::Tensor& ids) override {
    ids_ = torch::cat({ids_, ids.view({-1, 1})}, 1);
    return logits();
  }

 private:
  at::Tensor logits() {
    const int64_t batch = ids_.size(0), slots = ids_.size(1);
    if (!model_.takes_packed_records()) {
      std::vector<at::Tensor> rows;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t pad = padding_[b].item<int64_t>();
        const auto row = ids_.narrow(0, b, 1).narrow(1, pad, slots - pad).to(device_);
        rows.push_back(model_.forward(row).select(1, slots - pad - 1));
      }
      return torch::cat(rows, 0);
    }
    const auto slot = torch::arange(slots, torch::kInt64).unsqueeze(0);
    const auto pad = padding_.view({-1, 1});
    model::RecordInputs records;
    records.positions = (slot - pad).clamp_min(0).to(device_);
    records.segments =
        slot.ge(pad).to(torch::kInt64).expand({batch, slots}).contiguous().to(device_);
    records.rows = (torch::arange(batch, torch::kInt64) * slots + (slots - 1)).to(device_);
    return model_.forward_records(ids_.to(device_), records);
  }

  model::CausalLM& model_;
  at::Tensor padding_, ids_;
  c10::Device device_;
};

}  // namespace

std::vector<Completion> generate(model::CausalLM& model,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const GenerateOptions& options, const GenerateHooks& hooks) {
  PSTAR_CHECK(!prompts.empty(), ConfigError, "no prompts to generate from");
  PSTAR_CHECK(options.max_new_tokens >= 1, ConfigError, "--max-new-tokens ", options.max_new_tokens,
              ": expected at least 1");
  auto* decoder = dynamic_cast<model::Decoder*>(&model);
  const bool cached = options.use_cache && decoder != nullptr;
  int64_t context =
      options.context > 0 ? std::min(options.context, context_limit(model)) : context_limit(model);
  // Without the cache every forward covers the padded slots, which the model's max_seq_len bounds.
  if (!cached) context = std::min(context, model.max_seq_len());
  const auto batch = static_cast<int64_t>(prompts.size());
  int64_t longest = 0, shortest = context;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto length = static_cast<int64_t>(prompts[b].size());
    PSTAR_CHECK(length > 0, ConfigError, "prompt ", b, " is empty: nothing to continue");
    PSTAR_CHECK(length < context, ConfigError, "prompt ", b, " has ", length,
                " tokens, which leaves no room in the context of ", context,
                " positions for a new one; shorten it, or raise --max-length (up to the model's ",
                context_limit(model), ")");
    longest = std::max(longest, length);
    shortest = std::min(shortest, length);
  }
  // The most forwards after the prompt any row can use.
  const int64_t steps = std::min(options.max_new_tokens, context - shortest);
  auto padded = torch::full({batch, longest}, options.pad_id, torch::kInt64);
  auto padding = torch::empty({batch}, torch::kInt64);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& p = prompts[static_cast<size_t>(b)];
    const auto length = static_cast<int64_t>(p.size());
    padding[b] = longest - length;
    padded[b].narrow(0, longest - length, length).copy_(torch::tensor(p, torch::kInt64));
  }
  torch::NoGradGuard no_grad;
  const c10::Device device = options.device ? *options.device : device_of(model);
  std::unique_ptr<Stepper> stepper;
  if (cached)
    stepper = std::make_unique<CachedStepper>(*decoder, padding, longest + steps,
                                              std::max<int64_t>(1, options.prefill_block), device);
  else
    stepper = std::make_unique<FullStepper>(model, padding, device);
  Sampler sampler(options.sampling);
  std::vector<Completion> out(static_cast<size_t>(batch));
  std::vector<bool> active(static_cast<size_t>(batch), true);
  int64_t running = batch;
  at::Tensor logits = stepper->prefill(padded);
  for (int64_t step = 0;; ++step) {
    logits = logits.to(torch::kFloat32);
    if (hooks.on_logits) hooks.on_logits(step, logits);
    at::Tensor next = sampler.next(logits);
    if (hooks.override_ids) hooks.override_ids(step, next);
    const auto* drawn = next.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      const auto row = static_cast<size_t>(b);
      if (!active[row]) continue;
      Completion& c = out[row];
      const int64_t id = drawn[b];
      const auto& stops = options.stop_ids;
      if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        c.reason = StopReason::kStopToken;
        c.stop_id = id;
      } else {
        c.ids.push_back(id);
        if (hooks.on_token) hooks.on_token(b, id);
        const auto length = static_cast<int64_t>(c.ids.size());
        if (length < options.max_new_tokens &&
            static_cast<int64_t>(prompts[row].size()) + length < context)
          continue;
        c.reason =
            length == options.max_new_tokens ? StopReason::kMaxNewTokens : StopReason::kContext;
      }
      active[row] = false;
      --running;
    }
    if (step + 1 >= steps || (running == 0 && !options.fixed_steps)) break;
    logits = stepper->step(next);
  }
  return out;
}

}  // namespace pstar::generate
